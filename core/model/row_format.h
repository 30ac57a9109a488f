// Row formats of the Engram tables and their bitwise dequantisation rule
// (docs/design.md sections 1 and 4). The CUDA kernels implement exactly these
// functions; the CPU lookups and the kernels' references call them.
//
// FP8 rows: `dim` OCP E4M3 (e4m3fn) bytes, then dim/32 UE8M0 scale bytes.
// E4M3fn: bias 7, no infinity, 0x7f/0xff are NaN, subnormals m/8 * 2^-6,
// largest magnitude 448. UE8M0: 2^(e-127) for e in 1..254; the ends follow
// the table's ScaleByteRule (vLLM: 0 -> +0, 255 -> +inf, the exponent bits
// alone; SGLang's CUDA kernel: 0 -> 2^-127, 255 -> +inf; its torch fallback:
// 0 -> 2^-127, 255 -> NaN).
// bf16 rows: `dim` plain bf16 values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/model/table_spec.h"

namespace engram {

inline constexpr float kFp8E4M3Max = 448.0f;

float fp8_e4m3_to_float(uint8_t fp8);
// The one decoder of a scale byte: every dequantising path calls it.
float ue8m0_to_float(uint8_t scale_e8m0, ScaleByteRule rule);

// bf16_round_nearest_even(float(fp8) * ue8m0_to_float(scale, rule)). A NaN
// result (FP8 NaN, 0 * inf under kVllm, any value under kSglang's 255) is the
// canonical 0x7fc0 carrying the FP8 byte's sign, the same on every platform
// and on the GPU. Keeps -0 (the lookup rule below turns it into +0).
uint16_t dequantize_fp8_e4m3_to_bf16(uint8_t fp8, uint8_t scale_e8m0, ScaleByteRule rule);

// The lookup rule for one output value: -0 becomes +0 (the collective path
// sums one owner's value with +0 from every other rank, and -0 + +0 = +0), NaN
// becomes the canonical NaN with its sign kept, everything else unchanged.
inline uint16_t bf16_lookup_canonical(uint16_t bits) {
  if (bits == 0x8000u) return 0;
  if ((bits & 0x7f80u) == 0x7f80u && (bits & 0x007fu) != 0) return static_cast<uint16_t>(0x7fc0u | (bits & 0x8000u));
  return bits;
}
// The lookup rule under a table's MinusZeroRule: as above, but -0 kept where
// the rule keeps it.
inline uint16_t bf16_lookup_value(uint16_t bits, MinusZeroRule minus_zero) {
  if (bits == 0x8000u && keeps_minus_zero(minus_zero)) return bits;
  return bf16_lookup_canonical(bits);
}

uint64_t row_bytes_for(RowFormat format, int dim);

// Dequantises one stored row into `dim` bf16 values by the lookup rule
// (bf16_lookup_value applied to every value). Sizes are checked.
void dequantize_row(RowFormat format, int dim, ScaleByteRule rule, std::span<const std::byte> row,
                    std::span<uint16_t> out, MinusZeroRule minus_zero = MinusZeroRule::kWritePlusZero);
// The same with the table's format, dim, scale-byte and minus-zero rules.
inline void dequantize_row(const TableSpec& table, std::span<const std::byte> row, std::span<uint16_t> out) {
  dequantize_row(table.row_format, table.dim, table.scale_byte_rule, row, out, table.minus_zero);
}

// --- Encoding (tests, fillers) ---

// Round to nearest even onto the E4M3fn grid. Magnitudes past 448 saturate to
// +-448 (kSaturate) or become NaN (kNan: above 464, where rounding would
// leave the grid); NaN stays NaN (0x7f with the sign), -0 stays 0x80.
enum class Fp8Overflow : uint8_t { kSaturate, kNan };
uint8_t float_to_fp8_e4m3(float value, Fp8Overflow overflow);

// The smallest UE8M0 exponent that brings the block's largest finite
// magnitude within 448 (e = 127, scale 1, for an all-zero block); clamped to
// [1, 254] so the scale is finite and non-zero.
uint8_t choose_ue8m0_scale(std::span<const float> block);

// Encodes `dim` floats as one FP8 row (scales chosen per block of 32, values
// saturated) or one bf16 row (round to nearest even).
void encode_row(RowFormat format, std::span<const float> values, std::span<std::byte> row);

}  // namespace engram
