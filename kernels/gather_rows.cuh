// The warp-per-row gather kernel every row layout takes (the V4.1 row has
// its own, kernels/v41_fast_path.h): one warp per (token, head) row. Each
// lane reads 8 FP8 values (one 8-byte load; rows are 264 B apart, so 8-byte
// alignment is what V4.1 rows guarantee) plus its block's scale byte, and
// writes 8 bf16 (one 16-byte store), so a 256-value row is one coalesced
// 256 B read and 512 B write per warp. Rows whose stride or base breaks
// 8-byte alignment take a byte-wise path. Its row sources (shards, one owned
// shard, one host row range) and slot-to-id maps (flat, a head window) are
// here too. Internal to kernels/; nvcc only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/base/status.h"
#include "kernels/gather_kernels.h"
#include "kernels/gather_launch.h"
#include "kernels/row_dequant.cuh"

namespace engram::kernels {
namespace {

using detail::kThreadsPerBlock;
using detail::kWarpsPerBlock;

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
  device::ScaleDecoder scales;
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
  device::ScaleDecoder scales;
  static constexpr bool kZeroMissing = false;

  __device__ __forceinline__ const uint8_t* find(int64_t row) const {
    if (row < begin || row >= end) return nullptr;
    return base + static_cast<uint64_t>(row - begin) * row_bytes;
  }
};

// One row range passed by value whose missing rows are zero (host tables: a
// whole table or one TP slice of it).
struct RangeSource : OwnedSource {
  static constexpr bool kZeroMissing = true;
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
        const float scale = device::e8m0_scale(__ldg(row + dim + c / 4), source.scales);  // 4 lanes share a 32-value block
        uint32_t v[8];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          v[k] = device::dequant_fp8((packed.x >> (8 * k)) & 0xffu, scale, source.scales.minus_zero_bits);
          v[k + 4] = device::dequant_fp8((packed.y >> (8 * k)) & 0xffu, scale, source.scales.minus_zero_bits);
        }
        reinterpret_cast<uint4*>(dst)[c] =
            make_uint4(v[0] | (v[1] << 16), v[2] | (v[3] << 16), v[4] | (v[5] << 16), v[6] | (v[7] << 16));
      }
    } else {
      for (int i = lane; i < dim; i += 32) {
        const float scale = device::e8m0_scale(__ldg(row + dim + i / kScaleBlock), source.scales);
        dst[i] = static_cast<uint16_t>(device::dequant_fp8(__ldg(row + i), scale, source.scales.minus_zero_bits));
      }
    }
  } else {
    const uint16_t* values = reinterpret_cast<const uint16_t*>(row);
    if constexpr (kVector) {
      for (int c = lane; c < dim / 4; c += 32) {
        const uint2 packed = __ldg(reinterpret_cast<const uint2*>(values) + c);
        const uint32_t z = source.scales.minus_zero_bits;
        const uint32_t a = device::canonical_bf16(packed.x & 0xffffu, z) | (device::canonical_bf16(packed.x >> 16, z) << 16);
        const uint32_t b = device::canonical_bf16(packed.y & 0xffffu, z) | (device::canonical_bf16(packed.y >> 16, z) << 16);
        reinterpret_cast<uint2*>(dst)[c] = make_uint2(a, b);
      }
    } else {
      for (int i = lane; i < dim; i += 32)
        dst[i] = static_cast<uint16_t>(device::canonical_bf16(__ldg(values + i), source.scales.minus_zero_bits));
    }
  }
}

// Launches gather_rows over `row_slots` slots (vector: the 8-byte-load path,
// can_vectorise's rule and the bases' 8-byte alignment, checked by the caller).
template <class Source, class IdMap = FlatIds>
Status launch_rows(const int64_t* ids, int64_t row_slots, const RowLayout& layout, const Source& source, bool vector,
                   uint16_t* out, cudaStream_t stream, const char* kernel, IdMap id_index = {}) {
  ENGRAM_ASSIGN_OR_RETURN(const dim3 grid, detail::row_grid(row_slots, 1, kernel));
  const dim3 block(kThreadsPerBlock);
  const int dim = layout.dim;
  if (layout.format == RowFormat::kFp8E4M3Ue8m0) {
    if (vector) {
      gather_rows<RowFormat::kFp8E4M3Ue8m0, true><<<grid, block, 0, stream>>>(ids, row_slots, dim, source, out, id_index);
    } else {
      gather_rows<RowFormat::kFp8E4M3Ue8m0, false><<<grid, block, 0, stream>>>(ids, row_slots, dim, source, out, id_index);
    }
  } else {
    if (vector) {
      gather_rows<RowFormat::kBf16, true><<<grid, block, 0, stream>>>(ids, row_slots, dim, source, out, id_index);
    } else {
      gather_rows<RowFormat::kBf16, false><<<grid, block, 0, stream>>>(ids, row_slots, dim, source, out, id_index);
    }
  }
  return detail::launch_status(kernel);
}

}  // namespace
}  // namespace engram::kernels
