// The V4.1 row (dim 256, FP8) has a latency-tuned path, gather_fp8_256: at
// decode sizes a lookup is launch overhead plus its chain of dependent loads,
// so the chain is cut to two round trips: the ids and the shard table (starts
// and bases, one entry per lane, owner found by a warp ballot) load in
// parallel, then every row of the warp is read at once, data and scale word
// together. The peer path's variants and their per-size choice
// (kernels/gather_peer_variants.h) are here; gather_owned keeps 1, 2 or 4
// rows per warp; gather_range one.
#include <climits>
#include <cstdint>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "kernels/gather_launch.h"
#include "kernels/gather_peer_variants.h"
#include "kernels/gather_rows.cuh"
#include "kernels/v41_fast_path.h"
#include "kernels/v41_row.cuh"

namespace engram::kernels {
namespace {

using detail::can_vectorise;
using detail::is_fast_row;
using detail::kFastDim;
using detail::launch_status;
using detail::row_grid;

constexpr unsigned kFullMask = 0xffffffffu;

// Warp-cooperative sources: load_warp() runs once per warp, before any id is
// known; find() is called by all 32 lanes with the same row.
struct PeerWarpSource {
  const int64_t* starts;
  const void* const* bases;
  int shard_count;
  uint64_t row_bytes;
  device::ScaleDecoder scales;
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
  device::ScaleDecoder scales;
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
    store_values<kStream>(dst, data[k], scales[k], lane, source.scales);
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

template <class Source>
Status launch_owned_fp8_256(const int64_t* ids, int64_t row_slots, const Source& source, uint16_t* out,
                            cudaStream_t stream, const char* kernel) {
  const int rows = rows_per_warp(row_slots);
  ENGRAM_ASSIGN_OR_RETURN(const dim3 grid, row_grid(row_slots, rows, kernel));
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
    ENGRAM_ASSIGN_OR_RETURN(const dim3 grid, row_grid(row_slots, s.rows, "gather_peer"));
    gather_fp8_256<s.rows, s.wide, s.stream><<<grid, dim3(kThreadsPerBlock), 0, stream>>>(ids, row_slots, source, out);
    return launch_status("gather_peer");
  }
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
  ENGRAM_RETURN_IF_ERROR(detail::check_peer_args(args));
  if (args.tokens == 0) return Status::ok();
  if (!can_vectorise(args.layout, args.out) || !is_fast_row(args.layout)) {
    return invalid_argument(fmt::format("gather_peer: variant {} needs V4.1 rows (FP8, dim 256, row_bytes a multiple "
                                        "of 8) and 16-byte aligned out", peer_variant_name(variant)));
  }
  return detail::launch_v41_peer(args, variant, stream);
}

namespace detail {

Status launch_v41_peer(const GatherPeerArgs& args, const PeerVariant& variant, cudaStream_t stream) {
  PeerWarpSource source{args.shard_starts, args.shard_bases, args.shard_count, args.layout.row_bytes,
                        device::layout_decoder(args.layout)};
  return launch_peer_shape<0>(variant, args.ids, args.tokens * args.heads, source, args.out, stream);
}

Status launch_v41_owned(const GatherOwnedArgs& args, cudaStream_t stream) {
  OwnedWarpSource fast{args.shard_begin, args.shard_end, static_cast<const uint8_t*>(args.shard_base),
                       args.layout.row_bytes, device::layout_decoder(args.layout)};
  if (args.zero_missing) {
    return launch_owned_fp8_256(args.ids, args.tokens * args.heads, RangeWarpSource{fast}, args.out, stream,
                                "gather_owned");
  }
  return launch_owned_fp8_256(args.ids, args.tokens * args.heads, fast, args.out, stream, "gather_owned");
}

Status launch_v41_range(const HostRowsArgs& args, const void* base, cudaStream_t stream) {
  const int64_t slots = args.tokens * args.head_count;
  const WindowIds window{args.ids_per_token, args.head_begin, args.head_count};
  RangeWarpSource source;
  source.begin = args.first_row;
  source.end = args.first_row + args.row_count;
  source.base = static_cast<const uint8_t*>(base);
  source.row_bytes = args.layout.row_bytes;
  source.scales = device::layout_decoder(args.layout);
  ENGRAM_ASSIGN_OR_RETURN(const dim3 grid, row_grid(slots, 1, "gather_range"));
  gather_fp8_256<1, false, false><<<grid, dim3(kThreadsPerBlock), 0, stream>>>(args.ids, slots, source, args.out,
                                                                                 window);
  return launch_status("gather_range");
}

}  // namespace detail
}  // namespace engram::kernels
