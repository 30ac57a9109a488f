// Device kernels the lookup benchmark, the GPU tests and the GPU probes need
// beside the lookup itself: a deterministic on-device shard fill, the
// streaming copy that sets the copy floor, the plain reference gather, the
// plain id writer the device hasher is timed against (and that writer plus
// each id's modulo, its floor) and an empty kernel. Not part of the product
// libraries: they build into
// engram_bench_kernels (kernels/CMakeLists.txt); the graph timer's spin and
// L2 scrub are kernels/timing_kernels.h. Each call only enqueues on `stream`
// (capturable); errors are kInvalidArgument naming the field or kInternal
// with the CUDA error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/base/status.h"
#include "core/model/request_hash_words.h"

namespace engram::operator_checks {

// The byte pattern of table row `row`, word `word` (0..words_per_row-1) of
// `row_bytes / 8` 8-byte words: splitmix64(seed, row, word) for data words;
// the last word of an FP8 row of `dim` values (its dim/32 UE8M0 scales, when
// they fill exactly one word) holds scale bytes 112..143 so values stay
// ordinary. Host and device compute the same value (fill_word below).
struct ShardFillArgs {
  uint8_t* shard = nullptr;  // device pointer, 8-byte aligned
  int64_t first_row = 0;     // table row of shard row 0
  int64_t rows = 0;
  uint64_t row_bytes = 0;    // multiple of 8
  int dim = 0;               // FP8 values per row (scales start at byte dim)
  uint64_t seed = 0;
};
Status fill_shard(const ShardFillArgs& args, cudaStream_t stream);

// Host copy of the fill rule, for checking lookups against the CPU.
uint64_t fill_word(uint64_t seed, int64_t row, uint64_t word, uint64_t row_bytes, int dim);

// Reads `read_bytes` from `src` (16-byte aligned, multiple of 16) and writes
// `write_bytes` (16-byte aligned, multiple of 16, at most 2 * read_bytes) to
// `dst`, each source byte widened to 16 bits: a lookup's bytes moved as a
// plain stream. `src` may be a peer GPU's mapping.
Status stream_copy(const void* src, uint64_t read_bytes, void* dst, uint64_t write_bytes, cudaStream_t stream);

// The reference the targets are stated against: a plain
// warp-per-row gather of `slots` rows of `row_bytes` (8-byte multiple, at
// least 264) from shards split at `starts` and mapped at `bases`, both passed
// by value (kernel parameters, so no load stands between the id and its
// row); lane l reads data word l and every lane the last word, the bytes
// written widened to 16 bits with no dequantisation (512 B per row; `out`
// 16-byte aligned). DEAD and out-of-range ids give zero rows.
struct PlainGatherArgs {
  static constexpr int kMaxShards = 8;
  const int64_t* ids = nullptr;
  int64_t slots = 0;
  int shard_count = 0;                       // 1..kMaxShards
  int64_t starts[kMaxShards + 1] = {};       // shard s holds rows [starts[s], starts[s + 1])
  const void* bases[kMaxShards] = {};
  uint64_t row_bytes = 0;
  void* out = nullptr;
};
Status plain_gather(const PlainGatherArgs& args, cudaStream_t stream);

// What the device request hasher is timed against
// (benchmarks/device_hasher_probe.cc): reads each of `token_count` tokens
// and writes its `heads` ids (token + head), a thread per id, coalesced.
Status plain_ids(const int64_t* tokens, int64_t token_count, int heads, int64_t* ids, cudaStream_t stream);

// The plain kernel plus each id's own modulo: writes head_row(token x
// multiplier, heads[head]) (core/model/request_hash_words.h), a thread per id.
// The arithmetic every hasher must do per id on top of the plain kernel, and
// nothing else (no window, no run, no history): what the device hasher's
// target is held against as a floor.
Status plain_modulo_ids(const int64_t* tokens, int64_t token_count, const DeviceHashHead* heads, int head_count,
                        int64_t multiplier, int64_t* ids, cudaStream_t stream);

// One warp that does nothing: a graph of this one node is the fixed cost of
// launching and timing a one-kernel lookup.
Status empty_kernel(cudaStream_t stream);

}  // namespace engram::operator_checks
