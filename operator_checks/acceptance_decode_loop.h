// `engramlab acceptance`'s decode loop, one rank: requests served step by
// step with their ids hashed on the rank's device (core/lookup/
// device_request_hasher.h, one per table) and looked up by the runtime in
// the same captured graph (every table's hash, then its lookup, on one
// stream), the graph captured once and replayed across steps with each
// step's tokens and runs written into the hashers' fixed buffers. A prefill
// step, then decode tokens; an idle slot and padding every step; DEAD
// tokens; a request that ends half-way is replaced on a spare slot by one
// begun from lookback ids. Every id of every step is checked against the
// CPU RequestHasher, every looked-up slot against the CPU reference of the
// table fill, and the replays are timed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend/device_compute.h"
#include "core/base/status.h"
#include "core/runtime/engram_runtime.h"

namespace engram::operator_checks {

struct DecodeLoopOptions {
  int steps = 16;          // 0: no decode loop
  int requests = 4;
  int bucket_tokens = 32;  // the graph's tokens per step: a step's own, then padding
  uint64_t seed = 1;
  uint64_t fill_seed = 1;
  int64_t tokens_per_rank_max = 0;  // the runtime's slot (at least bucket_tokens)
  int warmup_replays = 5;
  int timed_replays = 50;
};

struct DecodeLoopReport {
  bool ran = false;
  int steps = 0;
  int requests = 0;
  int tables = 0;
  int64_t request_tokens = 0;    // tokens of real requests hashed, over steps (each table hashes them all)
  int64_t ids_checked = 0;       // device ids vs the CPU RequestHasher (padding included)
  int64_t slots_checked = 0;     // looked-up slots vs the CPU reference
  double latency_us_p50 = 0;     // one replay: every table's hash and lookup
  std::vector<std::string> mismatches;  // empty: every check held
};

// Collective where the runtime's device lookup is: every rank of the job
// runs it alike. Errors: a failed step (the hasher, the capture, the
// runtime); mismatches are in the report.
Status run_decode_loop(EngramRuntime& runtime, DeviceCompute& compute, const ModelSpec& model,
                       const DecodeLoopOptions& options, int world_rank, DecodeLoopReport& report);

// "rank 0 device_peer decode loop: PASS: 16 steps x 4 requests, 2 tables, one graph (hash + lookup) replayed per
// step: 4096 ids checked against the CPU RequestHasher, 4096 slots against the CPU reference; 80 request tokens;
// replay p50 41.2 us" (FAIL: the mismatches follow, one a line).
std::string format_decode_loop(int rank, Placement placement, const DecodeLoopReport& report);

}  // namespace engram::operator_checks
