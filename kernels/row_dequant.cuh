// Device-side row dequantisation, bit-exact with the CPU rule (DESIGN.md
// section 4): value = bf16_rne(float(fp8 E4M3) * 2^(e-127)), the scale built
// by putting e into a float's exponent bits (e = 0 gives +0, e = 255 +inf);
// NaN written as canonical 0x7fc0 carrying the FP8 byte's sign; -0 written as
// +0 so that every placement equals the collective path's sum with zeros.
#pragma once

#include <cstdint>

namespace engram::kernels::device {

// IEEE multiply that never flushes subnormals, whatever -ftz the build uses:
// FP8 subnormals and tiny scales produce float subnormals the CPU keeps.
__device__ __forceinline__ float mul_rn_no_ftz(float a, float b) {
  float c;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(c) : "f"(a), "f"(b));
  return c;
}

__device__ __forceinline__ float e8m0_scale(uint32_t e) { return __uint_as_float(e << 23); }

// Round to nearest even; the caller has handled NaN.
__device__ __forceinline__ uint32_t float_to_bf16_bits(float value) {
  uint32_t bits = __float_as_uint(value);
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ uint32_t dequant_fp8(uint32_t fp8, float scale) {
  const uint32_t sign = (fp8 & 0x80u) << 8;
  const uint32_t magnitude = fp8 & 0x7fu;
  if (magnitude == 0x7fu) return sign | 0x7fc0u;  // E4M3 NaN (e4m3fn has no inf)
  // The magnitude's exponent and mantissa fields, placed at the float's, give
  // a float 2^-120 times the FP8 value (a float subnormal for FP8 subnormals);
  // one multiply by 2^120 rebias it exactly.
  float value = mul_rn_no_ftz(__uint_as_float(magnitude << 20), 0x1p120f);
  value = mul_rn_no_ftz(value, scale);
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return sign | 0x7fc0u;  // 0 * inf
  const uint32_t out = float_to_bf16_bits(value) | sign;
  return out == 0x8000u ? 0u : out;
}

__device__ __forceinline__ uint32_t canonical_bf16(uint32_t bits) {
  if ((bits & 0x7fffu) > 0x7f80u) return (bits & 0x8000u) | 0x7fc0u;
  return bits == 0x8000u ? 0u : bits;
}

}  // namespace engram::kernels::device
