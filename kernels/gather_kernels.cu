// The lookup gather kernels: one warp per (token, head) row. Each lane reads
// 8 FP8 values (one 8-byte load; rows are 264 B apart, so 8-byte alignment is
// what V4.1 rows guarantee) plus its block's scale byte, and writes 8 bf16
// (one 16-byte store), so a 256-value row is one coalesced 256 B read and
// 512 B write per warp. Rows whose stride or base breaks 8-byte alignment
// take a byte-wise path.
//
// The V4.1 row (dim 256, FP8) has a latency-tuned path, gather_fp8_256: at
// decode sizes a lookup is launch overhead plus its chain of dependent loads,
// so the chain is cut to two round trips: the ids and the shard table (starts
// and bases, one entry per lane, owner found by a warp ballot) load in
// parallel, then every row of the warp is read at once, data and scale word
// together. The peer path's variants and their per-size choice are in
// kernels/gather_peer_variants.h; gather_owned keeps 1, 2 or 4 rows per warp.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "kernels/gather_kernels.h"
#include "kernels/gather_peer_variants.h"
#include "kernels/row_dequant.cuh"

namespace engram::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;

// Where slot s's id sits in the ids array: flat (slot = id index), or a head
// window of each token (slot s is token s / head_count, head head_begin +
// s % head_count of ids_per_token).
struct FlatIds {
  __device__ __forceinline__ int64_t operator()(int64_t slot) const { return slot; }
};
struct WindowIds {
  int ids_per_token;
  int head_begin;
  int head_count;
  __device__ __forceinline__ int64_t operator()(int64_t slot) const {
    const int64_t token = slot / head_count;
    return token * ids_per_token + head_begin + (slot - token * head_count);
  }
};
constexpr int kThreadsPerBlock = kWarpsPerBlock * 32;

// The owner of an in-table `row`: the last shard whose start <= row, by
// binary search over the shard starts (RowShardLayout::owner_of's rule, on
// the device). The one owner search of the peer kernels.
__device__ __forceinline__ int shard_owner(const int64_t* __restrict__ starts, int shard_count, int64_t row) {
  int lo = 0;
  int hi = shard_count;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (__ldg(starts + mid) <= row) lo = mid; else hi = mid;
  }
  return lo;
}

// device_peer: owner by binary search over the shard starts; anything not in
// [0, row_count) yields a zero row.
struct PeerSource {
  const int64_t* starts;
  const void* const* bases;
  int shard_count;
  uint64_t row_bytes;
  static constexpr bool kZeroMissing = true;

  __device__ __forceinline__ const uint8_t* find(int64_t row) const {
    if (row < 0 || row >= __ldg(starts + shard_count)) return nullptr;
    const int owner = shard_owner(starts, shard_count, row);
    const uint8_t* base = static_cast<const uint8_t*>(bases[owner]);
    return base + static_cast<uint64_t>(row - __ldg(starts + owner)) * row_bytes;
  }
};

// device_collective: only rows of this rank's shard; others stay untouched.
struct OwnedSource {
  int64_t begin;
  int64_t end;
  const uint8_t* base;
  uint64_t row_bytes;
  static constexpr bool kZeroMissing = false;

  __device__ __forceinline__ const uint8_t* find(int64_t row) const {
    if (row < begin || row >= end) return nullptr;
    return base + static_cast<uint64_t>(row - begin) * row_bytes;
  }
};

template <RowFormat kFormat, bool kVector, class Source, class IdMap = FlatIds>
__global__ void __launch_bounds__(kThreadsPerBlock)
    gather_rows(const int64_t* __restrict__ ids, int64_t row_slots, int dim, Source source,
                uint16_t* __restrict__ out, IdMap id_index = {}) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (slot >= row_slots) return;
  const uint8_t* row = source.find(__ldg(ids + id_index(slot)));
  uint16_t* dst = out + slot * dim;
  if (row == nullptr) {
    if constexpr (Source::kZeroMissing) {
      if constexpr (kVector) {
        const int chunks = kFormat == RowFormat::kFp8E4M3Ue8m0 ? dim / 8 : dim / 4;
        for (int c = lane; c < chunks; c += 32) {
          if constexpr (kFormat == RowFormat::kFp8E4M3Ue8m0) {
            reinterpret_cast<uint4*>(dst)[c] = make_uint4(0, 0, 0, 0);
          } else {
            reinterpret_cast<uint2*>(dst)[c] = make_uint2(0, 0);
          }
        }
      } else {
        for (int i = lane; i < dim; i += 32) dst[i] = 0;
      }
    }
    return;
  }
  if constexpr (kFormat == RowFormat::kFp8E4M3Ue8m0) {
    if constexpr (kVector) {
      for (int c = lane; c < dim / 8; c += 32) {
        const uint2 packed = __ldg(reinterpret_cast<const uint2*>(row) + c);
        const float scale = device::e8m0_scale(__ldg(row + dim + c / 4));  // 4 lanes share a 32-value block
        uint32_t v[8];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          v[k] = device::dequant_fp8((packed.x >> (8 * k)) & 0xffu, scale);
          v[k + 4] = device::dequant_fp8((packed.y >> (8 * k)) & 0xffu, scale);
        }
        reinterpret_cast<uint4*>(dst)[c] =
            make_uint4(v[0] | (v[1] << 16), v[2] | (v[3] << 16), v[4] | (v[5] << 16), v[6] | (v[7] << 16));
      }
    } else {
      for (int i = lane; i < dim; i += 32) {
        const float scale = device::e8m0_scale(__ldg(row + dim + i / kScaleBlock));
        dst[i] = static_cast<uint16_t>(device::dequant_fp8(__ldg(row + i), scale));
      }
    }
  } else {
    const uint16_t* values = reinterpret_cast<const uint16_t*>(row);
    if constexpr (kVector) {
      for (int c = lane; c < dim / 4; c += 32) {
        const uint2 packed = __ldg(reinterpret_cast<const uint2*>(values) + c);
        const uint32_t a = device::canonical_bf16(packed.x & 0xffffu) | (device::canonical_bf16(packed.x >> 16) << 16);
        const uint32_t b = device::canonical_bf16(packed.y & 0xffffu) | (device::canonical_bf16(packed.y >> 16) << 16);
        reinterpret_cast<uint2*>(dst)[c] = make_uint2(a, b);
      }
    } else {
      for (int i = lane; i < dim; i += 32) dst[i] = static_cast<uint16_t>(device::canonical_bf16(__ldg(values + i)));
    }
  }
}

Status check_layout(const RowLayout& layout, const char* kernel) {
  if (layout.dim <= 0) return invalid_argument(fmt::format("{}: layout.dim {} must be positive", kernel, layout.dim));
  uint64_t needed = 0;
  if (layout.format == RowFormat::kFp8E4M3Ue8m0) {
    if (layout.dim % kScaleBlock != 0) {
      return invalid_argument(fmt::format("{}: layout.dim {} must be a multiple of {} for FP8 rows (one UE8M0 "
                                          "scale per {} values)", kernel, layout.dim, kScaleBlock, kScaleBlock));
    }
    needed = static_cast<uint64_t>(layout.dim) + static_cast<uint64_t>(layout.dim / kScaleBlock);
  } else {
    needed = static_cast<uint64_t>(layout.dim) * 2;
  }
  if (layout.row_bytes < needed) {
    return invalid_argument(fmt::format("{}: layout.row_bytes {} is smaller than a row of {} values ({} bytes)",
                                        kernel, layout.row_bytes, layout.dim, needed));
  }
  return Status::ok();
}

Status launch_status(const char* kernel) {
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return Status::ok();
  return Status(ErrorCode::kInternal,
                fmt::format("{} launch failed: {} ({})", kernel, cudaGetErrorName(error), cudaGetErrorString(error)),
                ErrorContext{-1, -1, "launch"});
}

bool aligned(const void* p, uintptr_t alignment) { return reinterpret_cast<uintptr_t>(p) % alignment == 0; }

// The 8-byte-load path needs every row start 8-byte aligned (stride and
// bases) and, for FP8, the output rows 16-byte aligned.
bool can_vectorise(const RowLayout& layout, const uint16_t* out) {
  if (layout.row_bytes % 8 != 0) return false;
  if (layout.format == RowFormat::kFp8E4M3Ue8m0) return layout.dim % 8 == 0 && aligned(out, 16);
  return layout.dim % 4 == 0 && aligned(out, 8);
}

template <class Source>
Status launch(const int64_t* ids, int64_t row_slots, const RowLayout& layout, const Source& source, bool vector,
              uint16_t* out, cudaStream_t stream, const char* kernel) {
  const int64_t blocks = (row_slots + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) {
    return invalid_argument(fmt::format("{}: {} rows exceed one launch's grid", kernel, row_slots));
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  const dim3 block(kThreadsPerBlock);
  if (layout.format == RowFormat::kFp8E4M3Ue8m0) {
    if (vector) {
      gather_rows<RowFormat::kFp8E4M3Ue8m0, true><<<grid, block, 0, stream>>>(ids, row_slots, layout.dim, source, out);
    } else {
      gather_rows<RowFormat::kFp8E4M3Ue8m0, false><<<grid, block, 0, stream>>>(ids, row_slots, layout.dim, source, out);
    }
  } else {
    if (vector) {
      gather_rows<RowFormat::kBf16, true><<<grid, block, 0, stream>>>(ids, row_slots, layout.dim, source, out);
    } else {
      gather_rows<RowFormat::kBf16, false><<<grid, block, 0, stream>>>(ids, row_slots, layout.dim, source, out);
    }
  }
  return launch_status(kernel);
}

// ---- gather_fp8_256: the V4.1 row, vector path only ----

constexpr int kFastDim = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// Warp-cooperative sources: load_warp() runs once per warp, before any id is
// known; find() is called by all 32 lanes with the same row.
struct PeerWarpSource {
  const int64_t* starts;
  const void* const* bases;
  int shard_count;
  uint64_t row_bytes;
  static constexpr bool kZeroMissing = true;

  struct Table {
    int64_t start;       // starts[lane], or starts[shard_count] = row_count at lane shard_count
    uint64_t base;       // bases[lane]
    int64_t row_count;
  };

  __device__ __forceinline__ Table load_warp(int lane) const {
    Table t{INT64_MAX, 0, 0};
    if (shard_count < 32) {
      // One load per lane, all independent of the ids; row_count is lane
      // shard_count's start, shared after the loads land.
      if (lane <= shard_count) t.start = __ldg(starts + lane);
      if (lane < shard_count) t.base = __ldg(reinterpret_cast<const unsigned long long*>(bases) + lane);
      t.row_count = __shfl_sync(kFullMask, t.start, shard_count);
    } else {
      t.row_count = __ldg(starts + shard_count);
    }
    return t;
  }

  __device__ __forceinline__ const uint8_t* find(const Table& t, int64_t row, int lane) const {
    if (row < 0 || row >= t.row_count) return nullptr;
    int owner = 0;
    int64_t start = 0;
    uint64_t base = 0;
    if (shard_count < 32) {
      // Starts never decrease, so the lanes whose start <= row are a prefix
      // and the owner (the last shard whose start <= row) is its top lane.
      const unsigned below = __ballot_sync(kFullMask, lane < shard_count && t.start <= row);
      owner = below == 0 ? 0 : 31 - __clz(below);
      start = __shfl_sync(kFullMask, t.start, owner);
      base = __shfl_sync(kFullMask, t.base, owner);
    } else {
      owner = shard_owner(starts, shard_count, row);
      start = __ldg(starts + owner);
      base = __ldg(reinterpret_cast<const unsigned long long*>(bases) + owner);
    }
    return reinterpret_cast<const uint8_t*>(base) + static_cast<uint64_t>(row - start) * row_bytes;
  }
};

struct OwnedWarpSource {
  int64_t begin;
  int64_t end;
  const uint8_t* base;
  uint64_t row_bytes;
  static constexpr bool kZeroMissing = false;

  struct Table {};
  __device__ __forceinline__ Table load_warp(int) const { return {}; }
  __device__ __forceinline__ const uint8_t* find(const Table&, int64_t row, int) const {
    if (row < begin || row >= end) return nullptr;
    return base + static_cast<uint64_t>(row - begin) * row_bytes;
  }
};

// One row range passed by value whose missing rows are zero (host tables: a
// whole table or one TP slice of it).
struct RangeWarpSource : OwnedWarpSource {
  static constexpr bool kZeroMissing = true;
};
struct RangeSource : OwnedSource {
  static constexpr bool kZeroMissing = true;
};

// Lane l's share of one row: data word l (values 8l..8l+7) and the row's
// scale word -> 8 bf16, one 16-byte store.
template <bool kStream>
__device__ __forceinline__ void store_values(uint4* dst, uint2 data, uint2 scales, int lane) {
  const int block = lane >> 2;  // 4 lanes share a 32-value scale block
  const uint32_t scale_word = block < 4 ? scales.x : scales.y;
  const float scale = device::e8m0_scale((scale_word >> (8 * (block & 3))) & 0xffu);
  const uint2 low = device::dequant_fp8x4(data.x, scale);
  const uint2 high = device::dequant_fp8x4(data.y, scale);
  const uint4 value = make_uint4(low.x, low.y, high.x, high.y);
  if constexpr (kStream) {
    __stcs(dst, value);
  } else {
    *dst = value;
  }
}

template <bool kStream>
__device__ __forceinline__ void store_zero(uint4* dst) {
  if constexpr (kStream) {
    __stcs(dst, make_uint4(0, 0, 0, 0));
  } else {
    *dst = make_uint4(0, 0, 0, 0);
  }
}

// One warp, kRows consecutive slots; every row's loads are issued before
// any row is stored. 8-byte loads (kWide false): lane l reads data word l of
// each row and every lane the row's scale word: two load instructions per
// row, and the scale word's 128-byte line is asked for twice. 16-byte loads
// (kWide true): one load instruction per row, lanes 0..16 each reading one
// aligned 16-byte chunk of the row's 272-byte window (a row starts 16-byte
// aligned or 8 past it, so the window is the row plus 8 bytes before or
// after it, never outside the shard's 16-byte-rounded extent); shuffles then
// hand lane l its data word and the scale word. Over NVLink each request
// costs beside its bytes, so one request per 128-byte line is the cheapest
// way to move a 264-byte row.
template <int kRows, bool kWide, bool kStream, class Source, class IdMap = FlatIds>
__global__ void __launch_bounds__(kThreadsPerBlock)
    gather_fp8_256(const int64_t* __restrict__ ids, int64_t row_slots, const Source source,
                   uint16_t* __restrict__ out, IdMap id_index = {}) {
  const int lane = threadIdx.x & 31;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * kRows;
  if (first >= row_slots) return;  // warp-uniform
  int64_t lane_id = kDeadId;       // slots past the end act as DEAD and are never stored
  if (lane < kRows && first + lane < row_slots) lane_id = __ldg(ids + id_index(first + lane));
  const typename Source::Table table = source.load_warp(lane);

  const uint8_t* rows[kRows];
#pragma unroll
  for (int k = 0; k < kRows; ++k) rows[k] = source.find(table, __shfl_sync(kFullMask, lane_id, k), lane);

  uint2 data[kRows];
  uint2 scales[kRows];
  if constexpr (!kWide) {
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      data[k] = make_uint2(0, 0);
      scales[k] = make_uint2(0, 0);
      if (rows[k] != nullptr) {
        data[k] = __ldg(reinterpret_cast<const uint2*>(rows[k]) + lane);
        scales[k] = __ldg(reinterpret_cast<const uint2*>(rows[k] + kFastDim));
      }
    }
  } else {
    uint4 chunk[kRows];
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      chunk[k] = make_uint4(0, 0, 0, 0);
      if (rows[k] != nullptr && lane < 17) {
        const uintptr_t window = reinterpret_cast<uintptr_t>(rows[k]) & ~uintptr_t{15};
        chunk[k] = __ldg(reinterpret_cast<const uint4*>(window) + lane);
      }
    }
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      // Word w of the window is bytes 8w..8w+7; the row starts at word
      // `odd`, so lane l's data word is window word l + odd and the scale
      // word is window word 32 + odd (chunk 16).
      const int odd = static_cast<int>((reinterpret_cast<uintptr_t>(rows[k]) >> 3) & 1);
      const int word = lane + odd;
      const int src = word >> 1;
      const uint32_t x = __shfl_sync(kFullMask, chunk[k].x, src);
      const uint32_t y = __shfl_sync(kFullMask, chunk[k].y, src);
      const uint32_t z = __shfl_sync(kFullMask, chunk[k].z, src);
      const uint32_t w = __shfl_sync(kFullMask, chunk[k].w, src);
      data[k] = (word & 1) == 0 ? make_uint2(x, y) : make_uint2(z, w);
      const uint32_t sx = __shfl_sync(kFullMask, odd ? chunk[k].z : chunk[k].x, 16);
      const uint32_t sy = __shfl_sync(kFullMask, odd ? chunk[k].w : chunk[k].y, 16);
      scales[k] = make_uint2(sx, sy);
    }
  }
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    if (first + k >= row_slots) break;
    uint4* dst = reinterpret_cast<uint4*>(out + (first + k) * kFastDim) + lane;
    if (rows[k] == nullptr) {
      if constexpr (Source::kZeroMissing) store_zero<kStream>(dst);
      continue;
    }
    store_values<kStream>(dst, data[k], scales[k], lane);
  }
}

// Rows per warp for the collective path's gather_owned: 1 while the grid
// fits in one wave of the GPU (most warps, shortest chain), then 2 and 4 so
// that each warp keeps more rows in flight and fewer blocks churn.
int64_t warps_per_wave() {
  int device = 0;
  int sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && value > 0) sms = value;
  }
  return static_cast<int64_t>(sms) * 64;  // 2048 threads per SM
}

int rows_per_warp(int64_t row_slots) {
  const int64_t wave = warps_per_wave();
  if (row_slots <= wave) return 1;
  if (row_slots <= 2 * wave) return 2;
  return 4;
}

Result<dim3> fast_grid(int64_t row_slots, int rows, const char* kernel) {
  const int64_t slots_per_block = static_cast<int64_t>(kWarpsPerBlock) * rows;
  const int64_t blocks = (row_slots + slots_per_block - 1) / slots_per_block;
  if (blocks > 0x7fffffff) {
    return invalid_argument(fmt::format("{}: {} rows exceed one launch's grid", kernel, row_slots));
  }
  return dim3(static_cast<unsigned>(blocks));
}

template <class Source>
Status launch_owned_fp8_256(const int64_t* ids, int64_t row_slots, const Source& source, uint16_t* out,
                            cudaStream_t stream, const char* kernel) {
  const int rows = rows_per_warp(row_slots);
  ENGRAM_ASSIGN_OR_RETURN(const dim3 grid, fast_grid(row_slots, rows, kernel));
  const dim3 block(kThreadsPerBlock);
  switch (rows) {
    case 1: gather_fp8_256<1, false, false><<<grid, block, 0, stream>>>(ids, row_slots, source, out); break;
    case 2: gather_fp8_256<2, false, false><<<grid, block, 0, stream>>>(ids, row_slots, source, out); break;
    default: gather_fp8_256<4, false, false><<<grid, block, 0, stream>>>(ids, row_slots, source, out); break;
  }
  return launch_status(kernel);
}

// The peer variants compiled in: those peer_variant_for picks, each the
// fastest of a sweep over rows per warp (1, 2, 4, 8), 8/16-byte loads,
// streaming stores, an L2::256B prefetch hint and a by-value shard table on
// 2 x H200 (`engramlab bench --variants`); the others never won and were cut.
// (benchmarks/peer_gather_probe.cu times the pieces of a row read apart.)
struct PeerShape {
  int rows;
  bool wide;
  bool stream;
};
constexpr PeerShape kPeerShapes[] = {{1, false, false}, {1, true, true}};
constexpr int kPeerShapeCount = static_cast<int>(sizeof(kPeerShapes) / sizeof(kPeerShapes[0]));

bool same_shape(const PeerShape& s, const PeerVariant& v) {
  return s.rows == v.rows_per_warp && s.wide == v.wide_loads && s.stream == v.streaming_stores;
}

template <int I>
Status launch_peer_shape(const PeerVariant& v, const int64_t* ids, int64_t row_slots, const PeerWarpSource& source,
                         uint16_t* out, cudaStream_t stream) {
  if constexpr (I == kPeerShapeCount) {
    return invalid_argument(fmt::format("gather_peer: variant {} is not compiled in", peer_variant_name(v)));
  } else {
    constexpr PeerShape s = kPeerShapes[I];
    if (!same_shape(s, v)) return launch_peer_shape<I + 1>(v, ids, row_slots, source, out, stream);
    ENGRAM_ASSIGN_OR_RETURN(const dim3 grid, fast_grid(row_slots, s.rows, "gather_peer"));
    gather_fp8_256<s.rows, s.wide, s.stream><<<grid, dim3(kThreadsPerBlock), 0, stream>>>(ids, row_slots, source, out);
    return launch_status("gather_peer");
  }
}

bool is_fast_row(const RowLayout& layout) {
  return layout.format == RowFormat::kFp8E4M3Ue8m0 && layout.dim == kFastDim;
}

// Runs the fast path's `variant`; the args are checked by the caller.
Status launch_peer_variant(const GatherPeerArgs& args, const PeerVariant& variant, cudaStream_t stream) {
  PeerWarpSource source{args.shard_starts, args.shard_bases, args.shard_count, args.layout.row_bytes};
  return launch_peer_shape<0>(variant, args.ids, args.tokens * args.heads, source, args.out, stream);
}

Status check_peer_args(const GatherPeerArgs& args) {
  ENGRAM_RETURN_IF_ERROR(check_layout(args.layout, "gather_peer"));
  if (args.tokens < 0 || args.heads <= 0) {
    return invalid_argument(fmt::format("gather_peer: tokens {} must be >= 0 and heads {} > 0", args.tokens, args.heads));
  }
  if (args.tokens == 0) return Status::ok();
  if (args.ids == nullptr || args.out == nullptr || args.shard_starts == nullptr || args.shard_bases == nullptr) {
    return invalid_argument("gather_peer: ids, out, shard_starts and shard_bases must be device pointers, not null");
  }
  if (args.shard_count <= 0) {
    return invalid_argument(fmt::format("gather_peer: shard_count {} must be positive", args.shard_count));
  }
  return Status::ok();
}

}  // namespace

std::string peer_variant_name(const PeerVariant& v) {
  return fmt::format("r{}-w{}{}", v.rows_per_warp, v.wide_loads ? 16 : 8, v.streaming_stores ? "-cs" : "");
}

const std::vector<PeerVariant>& peer_variants() {
  static const std::vector<PeerVariant> all = [] {
    std::vector<PeerVariant> v;
    for (const PeerShape& s : kPeerShapes) v.push_back(PeerVariant{s.rows, s.wide, s.stream});
    return v;
  }();
  return all;
}

// One row per warp at every size: more rows per warp cost 1-3 us at 1..1024
// tokens (fewer warps, serial stores) and gained nothing at 8192. The
// one-load-per-row 16-byte path ties the 8-byte one at 1 and 16 tokens and is
// 0.5-5% faster from 64 up (fewer NVLink requests per row); streaming stores
// tie. r1-w8 stays compiled in as the sweep's point of comparison.
PeerVariant peer_variant_for(int64_t) { return PeerVariant{1, true, true}; }

Status gather_peer_variant(const GatherPeerArgs& args, const PeerVariant& variant, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(check_peer_args(args));
  if (args.tokens == 0) return Status::ok();
  if (!can_vectorise(args.layout, args.out) || !is_fast_row(args.layout)) {
    return invalid_argument(fmt::format("gather_peer: variant {} needs V4.1 rows (FP8, dim 256, row_bytes a multiple "
                                        "of 8) and 16-byte aligned out", peer_variant_name(variant)));
  }
  return launch_peer_variant(args, variant, stream);
}

namespace {

}  // namespace

RowLayout row_layout(const TableSpec& table) {
  RowLayout layout;
  layout.format = table.row_format;
  layout.dim = table.dim;
  layout.row_bytes = table.row_bytes();
  return layout;
}

Status gather_peer(const GatherPeerArgs& args, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(check_peer_args(args));
  if (args.tokens == 0) return Status::ok();
  // Shard bases live on the device, so their alignment is the caller's
  // contract: VMM mappings are granularity-aligned.
  const bool vector = can_vectorise(args.layout, args.out);
  if (vector && is_fast_row(args.layout)) {
    return launch_peer_variant(args, peer_variant_for(args.tokens * args.heads), stream);
  }
  PeerSource source{args.shard_starts, args.shard_bases, args.shard_count, args.layout.row_bytes};
  return launch(args.ids, args.tokens * args.heads, args.layout, source, vector, args.out, stream, "gather_peer");
}

Status gather_owned(const GatherOwnedArgs& args, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(check_layout(args.layout, "gather_owned"));
  if (args.tokens < 0 || args.heads <= 0) {
    return invalid_argument(fmt::format("gather_owned: tokens {} must be >= 0 and heads {} > 0", args.tokens, args.heads));
  }
  if (args.shard_begin < 0 || args.shard_end < args.shard_begin) {
    return invalid_argument(fmt::format("gather_owned: shard [{}, {}) is not a row range", args.shard_begin,
                                        args.shard_end));
  }
  if (args.tokens == 0) return Status::ok();
  if (args.ids == nullptr || args.out == nullptr || (args.shard_base == nullptr && args.shard_end > args.shard_begin)) {
    return invalid_argument("gather_owned: ids, out and shard_base must be device pointers, not null");
  }
  const bool vector = can_vectorise(args.layout, args.out) && aligned(args.shard_base, 8);
  if (vector && is_fast_row(args.layout)) {
    OwnedWarpSource fast{args.shard_begin, args.shard_end, static_cast<const uint8_t*>(args.shard_base),
                         args.layout.row_bytes};
    return launch_owned_fp8_256(args.ids, args.tokens * args.heads, fast, args.out, stream, "gather_owned");
  }
  OwnedSource source{args.shard_begin, args.shard_end, static_cast<const uint8_t*>(args.shard_base),
                     args.layout.row_bytes};
  return launch(args.ids, args.tokens * args.heads, args.layout, source, vector, args.out, stream, "gather_owned");
}

namespace {

// Warp per slot over the staged raw rows (device memory, row_bytes apart).
template <RowFormat kFormat>
__global__ void __launch_bounds__(kThreadsPerBlock)
    dequant_staged_rows(const int64_t* __restrict__ ids, int64_t slots, int ids_per_token, int head_begin,
                        int head_count, int64_t first_row, int64_t row_count, const uint8_t* __restrict__ staging,
                        uint64_t row_bytes, int dim, uint16_t* __restrict__ out) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (slot >= slots) return;
  const int64_t token = slot / head_count;
  const int head = head_begin + static_cast<int>(slot - token * head_count);
  const int64_t row = __ldg(ids + token * ids_per_token + head) - first_row;
  uint16_t* dst = out + slot * dim;
  if (row < 0 || row >= row_count) {
    for (int i = lane; i < dim; i += 32) dst[i] = 0;
    return;
  }
  const uint8_t* src = staging + static_cast<uint64_t>(slot) * row_bytes;
  if constexpr (kFormat == RowFormat::kFp8E4M3Ue8m0) {
    for (int i = lane; i < dim; i += 32) {
      const float scale = device::e8m0_scale(src[dim + i / kScaleBlock]);
      dst[i] = static_cast<uint16_t>(device::dequant_fp8(src[i], scale));
    }
  } else {
    const uint16_t* values = reinterpret_cast<const uint16_t*>(src);
    for (int i = lane; i < dim; i += 32) dst[i] = static_cast<uint16_t>(device::canonical_bf16(values[i]));
  }
}

// The V4.1 row: lane l dequantises values 8l..8l+7 (one 8-byte load, one
// 16-byte store); staging rows are 8-byte aligned (264 = 33 x 8).
__global__ void __launch_bounds__(kThreadsPerBlock)
    dequant_staged_fp8_256(const int64_t* __restrict__ ids, int64_t slots, int ids_per_token, int head_begin,
                           int head_count, int64_t first_row, int64_t row_count, const uint8_t* __restrict__ staging,
                           uint64_t row_bytes, uint16_t* __restrict__ out) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (slot >= slots) return;
  const int64_t token = slot / head_count;
  const int head = head_begin + static_cast<int>(slot - token * head_count);
  const int64_t row = __ldg(ids + token * ids_per_token + head) - first_row;
  uint4* dst = reinterpret_cast<uint4*>(out + slot * kFastDim) + lane;
  if (row < 0 || row >= row_count) {
    store_zero<true>(dst);
    return;
  }
  const uint8_t* src = staging + static_cast<uint64_t>(slot) * row_bytes;
  const uint2 data = __ldg(reinterpret_cast<const uint2*>(src) + lane);
  const uint2 scales = __ldg(reinterpret_cast<const uint2*>(src + kFastDim));
  store_values<true>(dst, data, scales, lane);
}

}  // namespace

Status dequant_staged(const DequantStagedArgs& args, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(check_layout(args.layout, "dequant_staged"));
  if (args.tokens < 0 || args.head_count <= 0 || args.head_begin < 0 ||
      args.head_begin + args.head_count > args.ids_per_token) {
    return invalid_argument(fmt::format("dequant_staged: tokens {} must be >= 0 and heads [{}, {}) inside the {} ids "
                                        "per token", args.tokens, args.head_begin, args.head_begin + args.head_count,
                                        args.ids_per_token));
  }
  if (args.tokens == 0) return Status::ok();
  if (args.ids == nullptr || args.out == nullptr || args.staging == nullptr) {
    return invalid_argument("dequant_staged: ids, staging and out must be device pointers, not null");
  }
  const int64_t slots = args.tokens * args.head_count;
  const int64_t blocks = (slots + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return invalid_argument(fmt::format("dequant_staged: {} rows exceed one launch's grid", slots));
  const dim3 grid(static_cast<unsigned>(blocks));
  const auto* staging = static_cast<const uint8_t*>(args.staging);
  if (is_fast_row(args.layout) && args.layout.row_bytes % 8 == 0 && aligned(args.staging, 8) && aligned(args.out, 16)) {
    dequant_staged_fp8_256<<<grid, kThreadsPerBlock, 0, stream>>>(args.ids, slots, args.ids_per_token,
                                                                  args.head_begin, args.head_count, args.first_row,
                                                                  args.row_count, staging, args.layout.row_bytes,
                                                                  args.out);
  } else if (args.layout.format == RowFormat::kFp8E4M3Ue8m0) {
    dequant_staged_rows<RowFormat::kFp8E4M3Ue8m0><<<grid, kThreadsPerBlock, 0, stream>>>(
        args.ids, slots, args.ids_per_token, args.head_begin, args.head_count, args.first_row, args.row_count,
        staging, args.layout.row_bytes, args.layout.dim, args.out);
  } else {
    dequant_staged_rows<RowFormat::kBf16><<<grid, kThreadsPerBlock, 0, stream>>>(
        args.ids, slots, args.ids_per_token, args.head_begin, args.head_count, args.first_row, args.row_count,
        staging, args.layout.row_bytes, args.layout.dim, args.out);
  }
  return launch_status("dequant_staged");
}

Status gather_range(const GatherRangeArgs& args, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(check_layout(args.layout, "gather_range"));
  if (args.tokens < 0 || args.head_count <= 0 || args.head_begin < 0 ||
      args.head_begin + args.head_count > args.ids_per_token) {
    return invalid_argument(fmt::format("gather_range: tokens {} must be >= 0 and heads [{}, {}) inside the {} ids "
                                        "per token", args.tokens, args.head_begin, args.head_begin + args.head_count,
                                        args.ids_per_token));
  }
  if (args.first_row < 0 || args.row_count < 0) {
    return invalid_argument(fmt::format("gather_range: rows [{}, +{}) are not a row range", args.first_row,
                                        args.row_count));
  }
  if (args.tokens == 0) return Status::ok();
  if (args.ids == nullptr || args.out == nullptr || (args.base == nullptr && args.row_count > 0)) {
    return invalid_argument("gather_range: ids, out and base must be device pointers, not null");
  }
  const int64_t slots = args.tokens * args.head_count;
  const WindowIds window{args.ids_per_token, args.head_begin, args.head_count};
  const auto* base = static_cast<const uint8_t*>(args.base);
  const int64_t end = args.first_row + args.row_count;
  if (can_vectorise(args.layout, args.out) && aligned(args.base, 8) && is_fast_row(args.layout)) {
    RangeWarpSource source;
    source.begin = args.first_row;
    source.end = end;
    source.base = base;
    source.row_bytes = args.layout.row_bytes;
    ENGRAM_ASSIGN_OR_RETURN(const dim3 grid, fast_grid(slots, 1, "gather_range"));
    gather_fp8_256<1, false, false><<<grid, dim3(kThreadsPerBlock), 0, stream>>>(args.ids, slots, source, args.out,
                                                                                   window);
    return launch_status("gather_range");
  }
  RangeSource source;
  source.begin = args.first_row;
  source.end = end;
  source.base = base;
  source.row_bytes = args.layout.row_bytes;
  const bool vector = can_vectorise(args.layout, args.out) && aligned(args.base, 8);
  const int64_t blocks = (slots + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return invalid_argument(fmt::format("gather_range: {} rows exceed one launch's grid", slots));
  const dim3 grid(static_cast<unsigned>(blocks));
  const int dim = args.layout.dim;
  if (args.layout.format == RowFormat::kFp8E4M3Ue8m0) {
    if (vector) gather_rows<RowFormat::kFp8E4M3Ue8m0, true><<<grid, kThreadsPerBlock, 0, stream>>>(args.ids, slots, dim, source, args.out, window);
    else gather_rows<RowFormat::kFp8E4M3Ue8m0, false><<<grid, kThreadsPerBlock, 0, stream>>>(args.ids, slots, dim, source, args.out, window);
  } else {
    if (vector) gather_rows<RowFormat::kBf16, true><<<grid, kThreadsPerBlock, 0, stream>>>(args.ids, slots, dim, source, args.out, window);
    else gather_rows<RowFormat::kBf16, false><<<grid, kThreadsPerBlock, 0, stream>>>(args.ids, slots, dim, source, args.out, window);
  }
  return launch_status("gather_range");
}

Status zero_fill(uint16_t* out, uint64_t count, cudaStream_t stream) {
  if (count == 0) return Status::ok();
  if (out == nullptr) return invalid_argument("zero_fill: out is null");
  cudaError_t error = cudaMemsetAsync(out, 0, count * sizeof(uint16_t), stream);
  if (error != cudaSuccess) {
    return Status(ErrorCode::kInternal,
                  fmt::format("zero_fill: cudaMemsetAsync of {} bf16 failed: {}", count, cudaGetErrorName(error)),
                  ErrorContext{-1, -1, "zero fill"});
  }
  return Status::ok();
}

}  // namespace engram::kernels
