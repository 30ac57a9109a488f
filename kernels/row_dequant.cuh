// Device-side row dequantisation, bit-exact with the CPU rule (docs/design.md
// section 4, core/model/row_format.h): value = bf16_rne(float(fp8 E4M3) *
// scale), the scale 2^(e-127) built by putting e into a float's exponent
// bits, but for scale bytes 0 and 255, which follow the table's
// scale_byte_rule (ScaleDecoder: vLLM +0 and +inf, SGLang's CUDA kernel
// 2^-127 and +inf, SGLang's torch fallback 2^-127 and NaN);
// NaN written as canonical 0x7fc0 carrying the FP8 byte's sign; -0 written as
// +0 so that every placement equals the collective path's sum with zeros,
// unless the table's engine keeps it (ScaleDecoder::minus_zero_bits).
#pragma once

#include <cstdint>

#include "core/model/table_spec.h"

namespace engram::kernels::device {

// Scale bytes 0 and 255 as floats' bits, by the table's rule; every other
// byte e is 2^(e-127) under both. Passed by value in every kernel's row
// source, so one captured graph keeps the rule it was captured with.
struct ScaleDecoder {
  uint32_t e0_bits = 0u;             // vLLM: +0 (exponent bits 0)
  uint32_t e255_bits = 0x7f800000u;  // vLLM: +inf (exponent bits 255)
  // What a -0 result is written as: 0 (+0, engramlab's rule) or 0x8000
  // (kept: keeps_minus_zero of the table's MinusZeroRule, vLLM's and SGLang's).
  uint32_t minus_zero_bits = 0u;
};
inline ScaleDecoder scale_decoder(ScaleByteRule rule, MinusZeroRule minus_zero = MinusZeroRule::kWritePlusZero) {
  ScaleDecoder d;
  if (rule != ScaleByteRule::kVllm) d.e0_bits = 0x00400000u;           // SGLang: 2^-127 (subnormal)
  if (rule == ScaleByteRule::kSglangTorch) d.e255_bits = 0x7fc00000u;  // its torch fallback: NaN
  d.minus_zero_bits = keeps_minus_zero(minus_zero) ? 0x8000u : 0u;
  return d;
}
// The decoder of a kernel layout (any struct with scale_byte_rule and minus_zero).
template <class Layout>
inline ScaleDecoder layout_decoder(const Layout& layout) {
  return scale_decoder(layout.scale_byte_rule, layout.minus_zero);
}
// IEEE multiply that never flushes subnormals, whatever -ftz the build uses:
// FP8 subnormals and tiny scales produce float subnormals the CPU keeps.
__device__ __forceinline__ float mul_rn_no_ftz(float a, float b) {
  float c;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(c) : "f"(a), "f"(b));
  return c;
}

__device__ __forceinline__ float e8m0_scale(uint32_t e, ScaleDecoder decoder) {
  return __uint_as_float(e == 0 ? decoder.e0_bits : e == 255 ? decoder.e255_bits : e << 23);
}

// Round to nearest even; the caller has handled NaN.
__device__ __forceinline__ uint32_t float_to_bf16_bits(float value) {
  uint32_t bits = __float_as_uint(value);
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ uint32_t dequant_fp8(uint32_t fp8, float scale, uint32_t minus_zero_bits = 0u) {
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
  return out == 0x8000u ? minus_zero_bits : out;
}

// Four FP8 values (the bytes of `packed`, low first) under one scale -> four
// bf16 in two words (value 2i in the low half of word i), the same bits as
// dequant_fp8 on each. On sm_89 and later the hardware converts: E4M3 pairs
// to f16 (exact), f16 to f32 (exact), one IEEE multiply, then a
// round-to-nearest-even pack to bf16; the CPU rule's NaN (the FP8 byte's sign
// with 0x7fc0, for FP8 NaN and 0 * inf alike) and -0 -> +0 are patched in
// afterwards. About a quarter of the scalar path's instructions, which shows
// at decode sizes, where a lookup is one dependent chain.
__device__ __forceinline__ uint2 dequant_fp8x4(uint32_t packed, float scale, uint32_t minus_zero_bits = 0u) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t words[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint32_t pair = half == 0 ? packed & 0xffffu : packed >> 16;
    // The two bytes' signs at bits 15 and 31.
    const uint32_t sign = __byte_perm(packed, 0, half == 0 ? 0x1404 : 0x3424) & 0x80008000u;
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<unsigned short>(pair)));
    float lo, hi;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
        : "=f"(lo), "=f"(hi) : "r"(h2));
    lo = mul_rn_no_ftz(lo, scale);
    hi = mul_rn_no_ftz(hi, scale);
    uint32_t bits;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(hi), "f"(lo));
    const uint32_t nan = __vcmpgtu2(bits & 0x7fff7fffu, 0x7f807f80u);
    bits = (bits & ~nan) | (nan & (sign | 0x7fc07fc0u));
    // -0 halves cleared to +0 unless the table keeps them.
    words[half] = minus_zero_bits != 0u ? bits : bits & ~__vcmpeq2(bits, 0x80008000u);
  }
  return make_uint2(words[0], words[1]);
#else
  uint32_t v[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) v[b] = dequant_fp8((packed >> (8 * b)) & 0xffu, scale, minus_zero_bits);
  return make_uint2(v[0] | (v[1] << 16), v[2] | (v[3] << 16));
#endif
}

__device__ __forceinline__ uint32_t canonical_bf16(uint32_t bits, uint32_t minus_zero_bits = 0u) {
  if ((bits & 0x7fffu) > 0x7f80u) return (bits & 0x8000u) | 0x7fc0u;
  return bits == 0x8000u ? minus_zero_bits : bits;
}

}  // namespace engram::kernels::device
