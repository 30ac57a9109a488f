// The request hasher's device steps (DeviceCompute::hash_requests and
// commit_requests, core/backend/device_compute.h), as CUDA kernels; their
// CPU reference is kernels/request_hash_reference.h. Enqueue only (no
// allocation, no host sync): one captured launch replays across steps,
// reading the step's run count, runs and tokens from device memory each
// time. Plain C++ header: callers need not be compiled by nvcc.
//
// extend / verify: one launch. Each block hashes a tile of tokens (a thread
// per token finds its run by binary search over the runs, builds the
// lookback window from the tokens and, before the run's first token, the
// slot's history, and mixes each order; then a thread per (token, head)
// takes the head's modulo by reciprocal and writes the ids coalesced). The
// last block to finish (a ticket word counting finished blocks and, above
// them, blocks that hashed a bad token; zeroed again by that block) checks
// every run and, when no error was found and none was pending, advances the
// runs' histories (extend) or stores their verify blocks: every block has
// read the histories by then, so one launch suffices.
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
  int slot_count = 0;
  int64_t* histories = nullptr;           // [slot_count][max_order - 1]
  int64_t verify_tokens_max = 0;
  int64_t* pending = nullptr;             // [slot_count][verify_tokens_max]
  int64_t* pending_counts = nullptr;      // [slot_count]
  uint64_t* error = nullptr;
  uint64_t* blocks_done = nullptr;        // the ticket, 0 between launches
};

struct RequestHashArgs {
  RequestHashTable table;
  bool verify = false;
  const int64_t* tokens = nullptr;        // [token_count]
  int64_t token_count = 0;
  const int64_t* run_count = nullptr;
  const DeviceRunWords* runs = nullptr;   // [slot_count]
  int64_t* row_ids = nullptr;             // [token_count][head_count]
};
Status request_hash(const RequestHashArgs& args, cudaStream_t stream);

struct RequestCommitArgs {
  RequestHashTable table;
  const int64_t* commit_count = nullptr;
  const DeviceCommitWords* commits = nullptr;  // [slot_count]
};
Status request_commit(const RequestCommitArgs& args, cudaStream_t stream);

}  // namespace engram::kernels
