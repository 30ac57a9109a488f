// The request hasher's device steps (DeviceCompute::hash_requests and
// commit_requests, core/backend/device_compute.h), as CUDA kernels; their
// CPU reference is kernels/request_hash_reference.h. Enqueue only (no
// allocation, no host sync): one captured launch replays across steps,
// reading the step's run count, runs and tokens from device memory each
// time. Plain C++ header: callers need not be compiled by nvcc.
//
// extend / verify: one launch, no block waiting for another. Every block
// loads in one round trip what it needs (the step's header and runs, its
// tile of tokens with their lookback halo, the heads, the histories). Block
// 0 checks every run, writes each good run's new history (extend) or
// pending block (verify), and on an extend copies across the histories of
// the slots no run advances; each other block hashes a tile of tokens with
// eight lanes a token (each lane finds the token's run by binary search,
// builds the window from the tokens and, before the run's first token, the
// slot's history, and takes the modulo by reciprocal of every eighth head,
// so a warp writes whole runs of ids). Histories are double buffered: an
// extend reads the buffer its header names and writes the other, so no
// block writes what another reads.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/base/status.h"
#include "core/model/request_hash_words.h"
#include "core/model/table_spec.h"

namespace engram::kernels {

// The table's rule and the state's buffers (DeviceRequestState).
struct RequestHashTable {
  const DeviceHashHead* heads = nullptr;  // [head_count]
  int head_count = 0;
  int max_order = 0;                      // 1..kMaxHashOrder; histories hold max_order - 1 ids
  int64_t multipliers[kMaxHashOrder] = {};
  int64_t pad_id = 0;
  int64_t compressed_vocab_size = 0;
  DeadTokenRule dead_token_rule = DeadTokenRule::kBarrier;
  int slot_count = 0;                     // 1..kMaxDeviceRequestSlots
  int64_t* histories = nullptr;           // [2][slot_count][max_order - 1]
  int64_t verify_tokens_max = 0;
  int64_t* pending = nullptr;             // [slot_count][verify_tokens_max]
  int64_t* pending_counts = nullptr;      // [slot_count]
  uint64_t* error = nullptr;
};

struct RequestHashArgs {
  RequestHashTable table;
  bool verify = false;
  const int64_t* tokens = nullptr;        // [token_count]
  int64_t token_count = 0;
  const int64_t* header = nullptr;        // [2]: the run count, the history buffer read (0 or 1)
  const DeviceRunWords* runs = nullptr;   // [slot_count]
  int64_t* row_ids = nullptr;             // [token_count][head_count]
};
Status request_hash(const RequestHashArgs& args, cudaStream_t stream);

struct RequestCommitArgs {
  RequestHashTable table;
  const int64_t* header = nullptr;        // [2]: the commit count, the history buffer (updated in place)
  const DeviceCommitWords* commits = nullptr;  // [slot_count]
};
Status request_commit(const RequestCommitArgs& args, cudaStream_t stream);

}  // namespace engram::kernels
