// bf16 bit manipulation shared by the lookup, the collectives and the kernels'
// CPU references. Round to nearest even; NaN kept NaN with a canonical payload.
#pragma once

#include <bit>
#include <cstdint>

namespace engram {

inline constexpr uint16_t kBf16CanonicalNan = 0x7fc0;

inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

inline uint16_t float_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>(kBf16CanonicalNan | ((bits >> 16) & 0x8000u));
  }
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline bool bf16_is_nan(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x007fu) != 0; }

// Bitwise equality with every NaN treated as one value (docs/design.md section 4).
inline bool bf16_same(uint16_t a, uint16_t b) { return a == b || (bf16_is_nan(a) && bf16_is_nan(b)); }

}  // namespace engram
