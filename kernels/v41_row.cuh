// One V4.1 row (dim 256, FP8) as one warp writes it: lane l stores values
// 8l..8l+7 as one 16-byte store. Shared by the fast path
// (kernels/v41_fast_path.cu) and the staged host rows' dequantisation
// (kernels/host_table_kernels.cu). Internal to kernels/; nvcc only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/row_dequant.cuh"

namespace engram::kernels {
namespace {

// Lane l's share of one row: data word l (values 8l..8l+7) and the row's
// scale word -> 8 bf16, one 16-byte store.
template <bool kStream>
__device__ __forceinline__ void store_values(uint4* dst, uint2 data, uint2 scales, int lane,
                                             device::ScaleDecoder decoder) {
  const int block = lane >> 2;  // 4 lanes share a 32-value scale block
  const uint32_t scale_word = block < 4 ? scales.x : scales.y;
  const float scale = device::e8m0_scale((scale_word >> (8 * (block & 3))) & 0xffu, decoder);
  const uint2 low = device::dequant_fp8x4(data.x, scale, decoder.minus_zero_bits);
  const uint2 high = device::dequant_fp8x4(data.y, scale, decoder.minus_zero_bits);
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

}  // namespace
}  // namespace engram::kernels
