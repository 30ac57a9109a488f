#include "core/model/row_format.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/base/bf16.h"
#include "core/base/status.h"

namespace engram {
namespace {

constexpr float decode_fp8_e4m3(uint8_t bits) {
  const bool negative = (bits & 0x80u) != 0;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float magnitude = 0.0f;
  if (exponent == 0xf && mantissa == 0x7) {
    magnitude = std::bit_cast<float>(0x7fc00000u);  // NaN
  } else if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) / 8.0f / 64.0f;  // m/8 * 2^-6
  } else {
    // (1 + m/8) * 2^(e-7), built exactly from bits: float exponent e-7+127.
    magnitude = std::bit_cast<float>((static_cast<uint32_t>(exponent - 7 + 127) << 23) |
                                     (static_cast<uint32_t>(mantissa) << 20));
  }
  return negative ? -magnitude : magnitude;
}

constexpr std::array<float, 256> make_fp8_table() {
  std::array<float, 256> table{};
  for (int i = 0; i < 256; ++i) table[static_cast<size_t>(i)] = decode_fp8_e4m3(static_cast<uint8_t>(i));
  return table;
}

constexpr std::array<float, 256> kFp8ToFloat = make_fp8_table();

// Fast path of dequantize_row. Every finite E4M3 value has at most 4
// significant bits and lies in [2^-9, 448], so for scales 2^k with
// -117 <= k <= 119 (e in [10, 246], read alike by every ScaleByteRule) the
// product is a normal float that bf16 holds exactly: no rounding, no
// subnormal, no overflow. Its bf16 bits are then the value's bf16 at scale 1
// with k added to the exponent field. The tables hold, per code, the lookup-rule result at scale 1 (zeros as +0, NaN
// canonical with the sign) and whether the exponent may be shifted (finite,
// non-zero).
inline constexpr int kFastScaleMin = 10;
inline constexpr int kFastScaleMax = 246;

constexpr std::array<uint16_t, 256> make_bf16_unit_table() {
  std::array<uint16_t, 256> table{};
  for (int code = 0; code < 256; ++code) {
    const float v = kFp8ToFloat[static_cast<size_t>(code)];
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    uint16_t out;
    if ((code & 0x7f) == 0x7f) out = static_cast<uint16_t>(0x7fc0u | ((code & 0x80u) << 8));
    else if ((code & 0x7f) == 0) out = 0;
    else out = static_cast<uint16_t>(bits >> 16);  // exact: 4 significant bits, normal float
    table[static_cast<size_t>(code)] = out;
  }
  return table;
}
constexpr std::array<uint16_t, 256> make_shift_mask_table() {
  std::array<uint16_t, 256> table{};
  for (int code = 0; code < 256; ++code)
    table[static_cast<size_t>(code)] = ((code & 0x7f) == 0x7f || (code & 0x7f) == 0) ? 0 : 0xffff;
  return table;
}
constexpr std::array<uint16_t, 256> kFp8ToBf16Unit = make_bf16_unit_table();
constexpr std::array<uint16_t, 256> kFp8ShiftMask = make_shift_mask_table();

}  // namespace

float fp8_e4m3_to_float(uint8_t fp8) { return kFp8ToFloat[fp8]; }

float ue8m0_to_float(uint8_t scale_e8m0, ScaleByteRule rule) {
  if (rule != ScaleByteRule::kVllm && scale_e8m0 == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127, a float subnormal
  // SGLang's torch fallback decodes through float8_e8m0fnu, whose 255 is NaN;
  // its CUDA kernel (and vLLM) put the byte into the exponent bits: +inf.
  if (rule == ScaleByteRule::kSglangTorch && scale_e8m0 == 255) return std::bit_cast<float>(0x7fc00000u);
  return std::bit_cast<float>(static_cast<uint32_t>(scale_e8m0) << 23);
}

namespace {
inline uint16_t dequantize_with_scale(uint8_t fp8, float scale) {
  const float value = kFp8ToFloat[fp8] * scale;
  // A NaN's sign would be the platform's choice for 0 * inf (x86 makes it
  // negative, ARM and CUDA positive); the FP8 byte's sign is everyone's.
  if (std::isnan(value)) return static_cast<uint16_t>(kBf16CanonicalNan | ((fp8 & 0x80u) << 8));
  return float_to_bf16(value);
}
}  // namespace

uint16_t dequantize_fp8_e4m3_to_bf16(uint8_t fp8, uint8_t scale_e8m0, ScaleByteRule rule) {
  return dequantize_with_scale(fp8, ue8m0_to_float(scale_e8m0, rule));
}

uint64_t row_bytes_for(RowFormat format, int dim) {
  ENGRAM_CHECK(dim > 0);
  switch (format) {
    case RowFormat::kFp8E4M3Ue8m0:
      ENGRAM_CHECK(dim % kScaleBlock == 0);
      return static_cast<uint64_t>(dim) + static_cast<uint64_t>(dim / kScaleBlock);
    case RowFormat::kBf16: return static_cast<uint64_t>(dim) * 2;
  }
  ENGRAM_CHECK(false && "unknown row format");
  return 0;
}

void dequantize_row(RowFormat format, int dim, ScaleByteRule rule, std::span<const std::byte> row,
                    std::span<uint16_t> out, MinusZeroRule minus_zero) {
  ENGRAM_CHECK(row.size() == row_bytes_for(format, dim));
  const bool keep_minus_zero = keeps_minus_zero(minus_zero);
  ENGRAM_CHECK(out.size() == static_cast<size_t>(dim));
  const auto* bytes = reinterpret_cast<const uint8_t*>(row.data());
  if (format == RowFormat::kFp8E4M3Ue8m0) {
    const uint8_t* scales = bytes + dim;
    for (int block = 0; block < dim / kScaleBlock; ++block) {
      const int base = block * kScaleBlock;
      const int e = scales[block];
      if (e >= kFastScaleMin && e <= kFastScaleMax) {
        // (e - 127) added to bf16's exponent field (bit 7 up), modulo 2^16.
        const uint16_t exponent_delta = static_cast<uint16_t>(static_cast<uint32_t>(e - 127) << 7);
        for (int i = base; i < base + kScaleBlock; ++i)
          out[static_cast<size_t>(i)] = static_cast<uint16_t>(kFp8ToBf16Unit[bytes[i]] +
                                                              (exponent_delta & kFp8ShiftMask[bytes[i]]));
        // Only FP8 -0 (0x80) gives -0 in this range of scales; the table holds it as +0.
        if (keep_minus_zero)
          for (int i = base; i < base + kScaleBlock; ++i)
            if (bytes[i] == 0x80u) out[static_cast<size_t>(i)] = 0x8000u;
        continue;
      }
      const float scale = ue8m0_to_float(scales[block], rule);
      for (int i = base; i < base + kScaleBlock; ++i)
        out[static_cast<size_t>(i)] = bf16_lookup_value(dequantize_with_scale(bytes[i], scale), minus_zero);
    }
    return;
  }
  for (int i = 0; i < dim; ++i) {
    uint16_t value;
    std::memcpy(&value, bytes + 2 * i, 2);  // rows need not be 2-byte aligned
    out[static_cast<size_t>(i)] = bf16_lookup_value(value, minus_zero);
  }
}

uint8_t float_to_fp8_e4m3(float value, Fp8Overflow overflow) {
  const uint8_t sign = std::signbit(value) ? 0x80u : 0x00u;
  if (std::isnan(value)) return static_cast<uint8_t>(sign | 0x7fu);
  const float magnitude = std::fabs(value);
  // Past 448 the next grid point would be 480 (code 0x7f, odd); RNE sends
  // (448, 464] to 448 and anything above off the grid.
  if (magnitude > 464.0f) {
    return static_cast<uint8_t>(sign | (overflow == Fp8Overflow::kSaturate ? 0x7eu : 0x7fu));
  }
  if (magnitude > kFp8E4M3Max) return static_cast<uint8_t>(sign | 0x7eu);
  // Codes 0x00..0x7e are increasing magnitudes: find the last one <= value.
  int low = 0, high = 0x7e;
  while (low < high) {
    int mid = (low + high + 1) / 2;
    if (kFp8ToFloat[static_cast<size_t>(mid)] <= magnitude) low = mid; else high = mid - 1;
  }
  int code = low;
  if (code < 0x7e && kFp8ToFloat[static_cast<size_t>(code)] != magnitude) {
    const float below = kFp8ToFloat[static_cast<size_t>(code)];
    const float above = kFp8ToFloat[static_cast<size_t>(code) + 1];
    // Both differences are exact: the grid points and `magnitude` are floats
    // within a few binades of each other.
    const float to_below = magnitude - below;
    const float to_above = above - magnitude;
    if (to_above < to_below || (to_above == to_below && (code & 1) == 1)) code += 1;
  }
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(code));
}

namespace {
// The encoder writes only bytes 1..254, which every rule reads alike.
constexpr ScaleByteRule kEncodeRule = ScaleByteRule::kVllm;
}  // namespace

uint8_t choose_ue8m0_scale(std::span<const float> block) {
  float amax = 0.0f;
  for (float v : block)
    if (std::isfinite(v)) amax = std::fmax(amax, std::fabs(v));
  if (amax == 0.0f) return 127;
  for (int e = 1; e < 255; ++e)
    if (amax <= kFp8E4M3Max * ue8m0_to_float(static_cast<uint8_t>(e), kEncodeRule)) return static_cast<uint8_t>(e);
  return 254;
}

void encode_row(RowFormat format, std::span<const float> values, std::span<std::byte> row) {
  const int dim = static_cast<int>(values.size());
  ENGRAM_CHECK(row.size() == row_bytes_for(format, dim));
  auto* bytes = reinterpret_cast<uint8_t*>(row.data());
  if (format == RowFormat::kFp8E4M3Ue8m0) {
    for (int block = 0; block < dim / kScaleBlock; ++block) {
      auto block_values = values.subspan(static_cast<size_t>(block) * kScaleBlock, kScaleBlock);
      const uint8_t e = choose_ue8m0_scale(block_values);
      const float scale = ue8m0_to_float(e, kEncodeRule);
      bytes[dim + block] = e;
      for (int i = 0; i < kScaleBlock; ++i)
        bytes[block * kScaleBlock + i] = float_to_fp8_e4m3(block_values[static_cast<size_t>(i)] / scale,
                                                           Fp8Overflow::kSaturate);
    }
    return;
  }
  for (int i = 0; i < dim; ++i) {
    uint16_t value = float_to_bf16(values[static_cast<size_t>(i)]);
    std::memcpy(bytes + 2 * i, &value, 2);
  }
}

}  // namespace engram
