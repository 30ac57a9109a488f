// The per-job secret that every rank presents before a peer talks to it.
#pragma once

#include <cstddef>
#include <string>

#include "core/base/status.h"

namespace engram::ipc {

// What a token may be: long enough to guess at no better than chance, short
// enough for the fd channel's hello frame.
inline constexpr size_t kMinJobTokenChars = 16;
inline constexpr size_t kMaxJobTokenBytes = 256;

// 32 hex characters from /dev/urandom.
Result<std::string> random_job_token();

// Compares in time independent of where the strings differ.
bool tokens_equal(const std::string& a, const std::string& b);

}  // namespace engram::ipc
