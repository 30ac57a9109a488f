// The per-job secret that every rank presents before a peer talks to it.
#pragma once

#include <string>

#include "core/base/status.h"

namespace engram::ipc {

// 32 hex characters from /dev/urandom.
Result<std::string> random_job_token();

// Compares in time independent of where the strings differ.
bool tokens_equal(const std::string& a, const std::string& b);

}  // namespace engram::ipc
