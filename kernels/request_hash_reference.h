// The request hasher's device steps (DeviceCompute::hash_requests and
// commit_requests, core/backend/device_compute.h) on the CPU, over host
// copies of the device buffers: what kernels/request_hash.cu computes, by
// TableHasher::hash_run and advance (the one per-token rule). The emulator
// runs it on emulated device memory; the GPU tests hold the kernel to it.
//
// Errors go to the error word as the smallest (code << 56 | index), as the
// kernel's atomicMin leaves it. An extend writes every slot's history into
// the buffer it does not read: a good run's slot advanced by its tokens,
// every other slot copied. A token outside the vocabulary is taken as DEAD
// (lookback, history, pending block) and gets DEAD ids; a bad run is not
// hashed nor advanced; a verify block too long is not stored; a bad commit
// stops the step's commits. Ids of a step with a bad run or run count are
// unspecified (here: all DEAD); every other word is exact.
#pragma once

#include <cstdint>
#include <span>

#include "core/model/hashing.h"
#include "core/model/request_hash_words.h"

namespace engram::kernels {

// Host copies of a DeviceRequestState's buffers.
struct RequestStateHost {
  int slot_count = 0;
  int64_t verify_tokens_max = 0;
  std::span<int64_t> histories;       // [2][slot_count][history_length]
  std::span<int64_t> pending;         // [slot_count][verify_tokens_max]
  std::span<int64_t> pending_counts;  // [slot_count]
  uint64_t* error = nullptr;
};

// header: {run count, history buffer read} as read from the device (any
// values). runs: slot_count entries, the first run count the step's.
// tokens: token_count ids; row_ids: token_count x heads.
void request_hash_reference(const TableHasher& hasher, bool verify, std::span<const int64_t> tokens,
                            const int64_t (&header)[2], std::span<const DeviceRunWords> runs, RequestStateHost state,
                            std::span<int64_t> row_ids);

// header: {commit count, history buffer}; commits: slot_count entries.
void request_commit_reference(const TableHasher& hasher, const int64_t (&header)[2],
                              std::span<const DeviceCommitWords> commits, RequestStateHost state);

}  // namespace engram::kernels
