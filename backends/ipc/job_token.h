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

// The part of job `job_id`'s shared names no other user can guess
// (core/backend/host_shared_memory.h): 16 hex characters of
// HMAC-SHA-256(token; label, job id). Every rank of a job holds the token, so
// all agree without a word, whatever launcher started them; another user,
// without the token, cannot predict it from the job id. One way: names are
// visible in /dev/shm, the token is not recoverable from them. The job id is
// in the MAC so the names of one step (seen while it runs) do not give away
// those of the next under the same token (Slurm steps, torchrun run ids);
// only a rerun with the same token and job id repeats its names
// (`engramlab launch` draws a fresh token each run unless one is set).
std::string shm_name_part(const std::string& job_token, const std::string& job_id);

}  // namespace engram::ipc
