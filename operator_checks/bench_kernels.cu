#include <cuda_runtime.h>
#include <fmt/format.h>

#include "operator_checks/bench_kernels.h"
#include "kernels/gather_launch.h"

namespace engram::operator_checks {
namespace {

__host__ __device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__host__ __device__ __forceinline__ uint64_t pattern_word(uint64_t seed, int64_t row, uint64_t word,
                                                          uint64_t row_bytes, int dim) {
  const uint64_t bits = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(row) * (row_bytes / 8) + word));
  // FP8 rows whose scales are exactly one word: keep scales in 112..143.
  if (dim % 256 == 0 && dim / 32 == 8 && word == static_cast<uint64_t>(dim) / 8) {
    return (bits & 0x1f1f1f1f1f1f1f1full) + 0x7070707070707070ull;
  }
  return bits;
}

__global__ void fill_kernel(uint64_t* shard, uint64_t words, uint64_t words_per_row, int64_t first_row,
                            uint64_t row_bytes, int dim, uint64_t seed) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t w = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < words; w += stride) {
    const uint64_t row = w / words_per_row;
    shard[w] = pattern_word(seed, first_row + static_cast<int64_t>(row), w - row * words_per_row, row_bytes, dim);
  }
}

__device__ __forceinline__ uint4 widen_low(uint2 v) {
  // bytes b0..b7 -> 16-bit lanes b0..b7 (zero-extended)
  return make_uint4(__byte_perm(v.x, 0, 0x4140), __byte_perm(v.x, 0, 0x4342), __byte_perm(v.y, 0, 0x4140),
                    __byte_perm(v.y, 0, 0x4342));
}

// Thread t loads source chunk t (16 B); the warp's 32 chunks widen to 64
// output chunks, stored as two fully coalesced 512 B rows: store 1 lane l
// takes half (l & 1) of source lane l / 2, store 2 of source lane 16 + l / 2.
__global__ void stream_copy_kernel(const uint4* __restrict__ src, uint64_t read_chunks, uint4* __restrict__ dst,
                                   uint64_t write_chunks) {
  const uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31;
  uint4 v = make_uint4(0, 0, 0, 0);
  if (t < read_chunks) v = __ldcs(src + t);
  const uint64_t warp_first = t - lane;
  for (int half = 0; half < 2; ++half) {
    const int from = half * 16 + lane / 2;
    const uint32_t x = __shfl_sync(0xffffffffu, v.x, from);
    const uint32_t y = __shfl_sync(0xffffffffu, v.y, from);
    const uint32_t z = __shfl_sync(0xffffffffu, v.z, from);
    const uint32_t w = __shfl_sync(0xffffffffu, v.w, from);
    const uint4 out = (lane & 1) == 0 ? widen_low(make_uint2(x, y)) : widen_low(make_uint2(z, w));
    const uint64_t chunk = 2 * warp_first + static_cast<uint64_t>(half) * 32 + lane;
    if (chunk < write_chunks) dst[chunk] = out;
  }
}

__global__ void plain_gather_kernel(const PlainGatherArgs a) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (slot >= a.slots) return;
  const int64_t id = a.ids[slot];
  uint4* dst = static_cast<uint4*>(a.out) + slot * 32 + lane;
  if (id < 0 || id >= a.starts[a.shard_count]) {
    *dst = make_uint4(0, 0, 0, 0);
    return;
  }
  int owner = 0;
  while (owner + 1 < a.shard_count && a.starts[owner + 1] <= id) ++owner;
  const uint8_t* row = static_cast<const uint8_t*>(a.bases[owner]) + (id - a.starts[owner]) * a.row_bytes;
  const uint2 data = reinterpret_cast<const uint2*>(row)[lane];
  const uint2 last = reinterpret_cast<const uint2*>(row)[a.row_bytes / 8 - 1];
  *dst = make_uint4(data.x, data.y, last.x, last.y);
}

__global__ void empty_kernel_body() {}

__global__ void plain_ids_kernel(const int64_t* tokens, int64_t ids_count, int heads, int64_t* ids) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= ids_count) return;
  const int64_t token = i / heads;
  ids[i] = tokens[token] + (i - token * heads);
}

// A thread per id; the token and head by one division (as plain_ids).
__global__ void plain_modulo_ids_kernel(const int64_t* tokens, int64_t ids_count, const DeviceHashHead* heads,
                                        int head_count, int64_t multiplier, int64_t* ids) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= ids_count) return;
  const int64_t token = i / head_count;
  const DeviceHashHead h = heads[i - token * head_count];
  ids[i] = head_row(static_cast<int64_t>(static_cast<uint64_t>(tokens[token]) * static_cast<uint64_t>(multiplier)), h);
}

}  // namespace

uint64_t fill_word(uint64_t seed, int64_t row, uint64_t word, uint64_t row_bytes, int dim) {
  return pattern_word(seed, row, word, row_bytes, dim);
}

Status fill_shard(const ShardFillArgs& args, cudaStream_t stream) {
  if (args.row_bytes == 0 || args.row_bytes % 8 != 0) {
    return invalid_argument(fmt::format("fill_shard: row_bytes {} must be a positive multiple of 8", args.row_bytes));
  }
  if (args.rows < 0 || args.first_row < 0) {
    return invalid_argument(fmt::format("fill_shard: rows {} and first_row {} must be >= 0", args.rows, args.first_row));
  }
  if (args.rows == 0) return Status::ok();
  if (args.shard == nullptr || reinterpret_cast<uintptr_t>(args.shard) % 8 != 0) {
    return invalid_argument("fill_shard: shard must be an 8-byte aligned device pointer");
  }
  const uint64_t words_per_row = args.row_bytes / 8;
  const uint64_t words = static_cast<uint64_t>(args.rows) * words_per_row;
  fill_kernel<<<4096, 256, 0, stream>>>(reinterpret_cast<uint64_t*>(args.shard), words, words_per_row, args.first_row,
                                         args.row_bytes, args.dim, args.seed);
  return kernels::detail::launch_status("fill_shard");
}

Status stream_copy(const void* src, uint64_t read_bytes, void* dst, uint64_t write_bytes, cudaStream_t stream) {
  if (read_bytes % 16 != 0 || write_bytes % 16 != 0 || write_bytes > 2 * read_bytes) {
    return invalid_argument(fmt::format("stream_copy: read_bytes {} and write_bytes {} must be multiples of 16 with "
                                        "write_bytes <= 2 * read_bytes", read_bytes, write_bytes));
  }
  if (read_bytes == 0) return Status::ok();
  if (src == nullptr || dst == nullptr || !kernels::detail::aligned(src, 16) || !kernels::detail::aligned(dst, 16)) {
    return invalid_argument("stream_copy: src and dst must be 16-byte aligned device pointers");
  }
  const uint64_t read_chunks = read_bytes / 16;
  const uint64_t blocks = (read_chunks + 255) / 256;
  if (blocks > 0x7fffffffull) return invalid_argument(fmt::format("stream_copy: {} bytes exceed one grid", read_bytes));
  stream_copy_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(static_cast<const uint4*>(src), read_chunks,
                                                                         static_cast<uint4*>(dst), write_bytes / 16);
  return kernels::detail::launch_status("stream_copy");
}

Status plain_gather(const PlainGatherArgs& a, cudaStream_t stream) {
  if (a.slots < 0 || a.shard_count < 1 || a.shard_count > PlainGatherArgs::kMaxShards || a.row_bytes < 264 ||
      a.row_bytes % 8 != 0) {
    return invalid_argument(fmt::format("plain_gather: slots {} must be >= 0, shard_count {} in 1..{} and row_bytes {} "
                                        "a multiple of 8 of at least 264", a.slots, a.shard_count,
                                        PlainGatherArgs::kMaxShards, a.row_bytes));
  }
  if (a.slots == 0) return Status::ok();
  if (a.ids == nullptr || a.out == nullptr || !kernels::detail::aligned(a.out, 16)) {
    return invalid_argument("plain_gather: ids and out must be device pointers, out 16-byte aligned");
  }
  for (int s = 0; s < a.shard_count; ++s) {
    if (a.bases[s] == nullptr || a.starts[s + 1] < a.starts[s]) {
      return invalid_argument(fmt::format("plain_gather: shard {} has base {} and rows [{}, {}); give every shard a "
                                          "mapped base and non-decreasing starts", s, a.bases[s], a.starts[s],
                                          a.starts[s + 1]));
    }
  }
  const int64_t blocks = (a.slots + 7) / 8;
  if (blocks > 0x7fffffff) return invalid_argument(fmt::format("plain_gather: {} rows exceed one grid", a.slots));
  plain_gather_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(a);
  return kernels::detail::launch_status("plain_gather");
}

Status plain_ids(const int64_t* tokens, int64_t token_count, int heads, int64_t* ids, cudaStream_t stream) {
  if (token_count < 0 || heads < 1 || (token_count > 0 && (tokens == nullptr || ids == nullptr)))
    return invalid_argument(fmt::format("plain_ids: token_count {} must be >= 0, heads {} >= 1, tokens and ids device "
                                        "pointers", token_count, heads));
  const int64_t ids_count = token_count * heads;
  if (ids_count == 0) return Status::ok();
  constexpr int kThreads = 256;
  plain_ids_kernel<<<static_cast<unsigned>((ids_count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      tokens, ids_count, heads, ids);
  return kernels::detail::launch_status("plain_ids");
}

Status plain_modulo_ids(const int64_t* tokens, int64_t token_count, const DeviceHashHead* heads, int head_count,
                        int64_t multiplier, int64_t* ids, cudaStream_t stream) {
  if (token_count < 0 || head_count < 1 || heads == nullptr || (token_count > 0 && (tokens == nullptr || ids == nullptr)))
    return invalid_argument(fmt::format("plain_modulo_ids: token_count {} must be >= 0, head_count {} >= 1, tokens, "
                                        "heads and ids device pointers", token_count, head_count));
  const int64_t ids_count = token_count * head_count;
  if (ids_count == 0) return Status::ok();
  constexpr int kThreads = 256;
  plain_modulo_ids_kernel<<<static_cast<unsigned>((ids_count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      tokens, ids_count, heads, head_count, multiplier, ids);
  return kernels::detail::launch_status("plain_modulo_ids");
}

Status empty_kernel(cudaStream_t stream) {
  empty_kernel_body<<<1, 32, 0, stream>>>();
  return kernels::detail::launch_status("empty_kernel");
}

}  // namespace engram::operator_checks
