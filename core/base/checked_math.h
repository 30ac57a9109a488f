// Size arithmetic that cannot wrap silently. Inputs are bounded where users
// give them (parse_bytes, the deployment's host, rank and token caps), so
// within those bounds these never fire; past them they stop the program
// rather than print a wrapped size.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "core/base/status.h"

namespace engram {

inline uint64_t checked_add(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  ENGRAM_CHECK(!__builtin_add_overflow(a, b, &sum));
  return sum;
}

inline uint64_t checked_mul(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  ENGRAM_CHECK(!__builtin_mul_overflow(a, b, &product));
  return product;
}

// For sizes read from a file or a flag: nullopt where a * b (a + b) does not
// fit in 64 bits, so the caller names the field that made it overflow
// (an invalid_argument), where checked_mul would stop the program.
inline std::optional<uint64_t> product_if_fits(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

inline std::optional<uint64_t> sum_if_fits(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

// a - b as a signed count of bytes (negative: b does not fit in a).
inline int64_t checked_signed_difference(uint64_t a, uint64_t b) {
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  ENGRAM_CHECK(a <= kMax && b <= kMax);
  return static_cast<int64_t>(a) - static_cast<int64_t>(b);
}

}  // namespace engram
