// The request hasher's device steps (DeviceCompute::hash_requests and
// commit_requests, core/backend/device_compute.h) on the CPU, over host
// copies of the device buffers: what kernels/request_hash.cu computes, by
// TableHasher::hash_run and advance (the one per-token rule). The emulator
// runs it on emulated device memory; the GPU tests hold the kernel to it.
//
// A step first checks its whole input (the run count, every run, every
// covered token; the error word takes the smallest error, as the kernel's
// atomicMin does), then hashes, then changes histories and pending blocks
// only when the error word (the sticky one included) holds no error. Ids of
// a step whose runs are bad are unspecified (here: all DEAD); with good runs
// a bad token's ids are DEAD, as are those of every token whose lookback
// reads it, and the rest are exact.
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
  std::span<int64_t> histories;       // [slot_count][history_length]
  std::span<int64_t> pending;         // [slot_count][verify_tokens_max]
  std::span<int64_t> pending_counts;  // [slot_count]
  uint64_t* error = nullptr;
};

// runs: slot_count entries, of which the first run_count are the step's
// (run_count as read from the device: any value). tokens: token_count ids;
// row_ids: token_count x heads.
void request_hash_reference(const TableHasher& hasher, bool verify, std::span<const int64_t> tokens,
                            int64_t run_count, std::span<const DeviceRunWords> runs, RequestStateHost state,
                            std::span<int64_t> row_ids);

// commits: slot_count entries, the first commit_count the step's.
void request_commit_reference(const TableHasher& hasher, int64_t commit_count,
                              std::span<const DeviceCommitWords> commits, RequestStateHost state);

}  // namespace engram::kernels
