// One row of the deterministic table fill (core/model/table_fill.h), as a
// function both the CPU and the GPU compile, so a shard filled on the device
// holds exactly the bytes the CPU reference fills. Plain C++ (no CUDA
// header): nvcc marks it host-and-device, every other compiler sees a
// normal inline function.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/base/host_device.h"
#include "core/base/splitmix64.h"

namespace engram::fill {

// Whether a uint64_t's bytes lie lowest first (x86, Arm as Linux runs it,
// every NVIDIA GPU): the rows' byte order, so a draw can be stored whole.
// Elsewhere the byte loops below write the same bytes.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
inline constexpr bool kLittleEndian = true;
#else
inline constexpr bool kLittleEndian = false;
#endif

// The seed of a layer's rows: row r draws from splitmix64_at(layer_seed, r).
ENGRAM_HOST_DEVICE inline uint64_t layer_seed(uint64_t seed, int layer_id) {
  return seed ^ (static_cast<uint64_t>(layer_id) * 0x9e3779b97f4a7c15ull);
}

ENGRAM_HOST_DEVICE inline uint64_t next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

ENGRAM_HOST_DEVICE inline uint64_t start_state(uint64_t layer_seed_value, uint64_t row) {
  uint64_t state = layer_seed_value ^ (row * 0xd1342543de82ef95ull);
  return next(state);  // splitmix64_at: the row's own stream starts from one draw
}

ENGRAM_HOST_DEVICE inline uint8_t draw_scale(uint64_t& state) {
  const uint64_t draw = next(state);
  switch (draw % 64) {
    case 0: return 0;    // scale +0: every value becomes +-0 (or NaN)
    case 1: return 255;  // scale +inf: infinities, and 0 * inf = NaN
    case 2: return 1;    // results in the float subnormal range
    case 3: return 254;  // results past bf16's finite range
    default: return static_cast<uint8_t>(127 - 24 + static_cast<int>((draw >> 8) % 33));  // 2^-24 .. 2^8
  }
}

// E4M3fn codes the semantics care about: +-0, subnormals, the largest
// normals (+-448), NaN.
ENGRAM_HOST_DEVICE constexpr uint8_t fp8_special(unsigned index) {
  constexpr uint8_t kCodes[] = {0x00, 0x80, 0x01, 0x81, 0x07, 0x87, 0x08, 0x7e, 0xfe, 0x7f, 0xff, 0x38, 0xb8};
  return kCodes[index % sizeof(kCodes)];
}

#if !defined(__CUDA_ARCH__)
// On the CPU, a special FP8 row's byte through one table: code c as the row
// stores it (c itself when even, fp8_special(c >> 1) when odd). The select
// per byte cost a modulo and two loads, and special rows (one in four) took
// two thirds of the fill's time. The GPU computes the same bytes directly:
// a table would sit in each thread's local memory.
inline constexpr struct Fp8SpecialBytes {
  uint8_t of[256];
  constexpr Fp8SpecialBytes() : of() {
    for (unsigned c = 0; c < 256; ++c) of[c] = (c & 1) != 0 ? fp8_special(c >> 1) : static_cast<uint8_t>(c);
  }
} kFp8SpecialBytes;
#endif

// bf16: -0, canonical and non-canonical NaN, subnormals, max finite, inf.
ENGRAM_HOST_DEVICE inline uint16_t bf16_special(unsigned index) {
  constexpr uint16_t kCodes[] = {0x0000, 0x8000, 0x7fc0, 0xffc1, 0x7f81, 0x0001, 0x8001,
                                 0x007f, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x3f80, 0xbf80};
  return kCodes[index % (sizeof(kCodes) / sizeof(kCodes[0]))];
}

// Writes row `row` (dim values; FP8 rows then dim/32 scale bytes) at `out`.
// One row in four is dense with special values; the rest are random codes
// (which still hit every special code now and then).
ENGRAM_HOST_DEVICE inline void fill_row(bool fp8, int dim, uint64_t layer_seed_value, uint64_t row, uint8_t* out) {
  uint64_t state = start_state(layer_seed_value, row);
  const bool special_row = (next(state) & 3) == 0;
  if (fp8) {
    for (int v = 0; v < dim; v += 8) {
      const uint64_t bits = next(state);
      // An ordinary row's codes are the draw's bytes in order (lowest
      // first): one 8-byte store instead of eight (the host fill of a real
      // table is bound by these stores where page faults are not).
      if (kLittleEndian && !special_row && v + 8 <= dim) {
        memcpy(out + v, &bits, 8);
        continue;
      }
      // A select, not a branch: whether a code is swapped is a coin flip
      // per byte, and a branch on it mispredicted about every other byte
      // (the fill ran at a fifth of its speed).
      for (int b = 0; b < 8 && v + b < dim; ++b) {
        const uint8_t code = static_cast<uint8_t>(bits >> (8 * b));
#if defined(__CUDA_ARCH__)
        const uint8_t special = fp8_special(code >> 1);
        out[v + b] = special_row && (code & 1) ? special : code;
#else
        out[v + b] = special_row ? kFp8SpecialBytes.of[code] : code;
#endif
      }
    }
    for (int block = 0; block < dim / 32; ++block) out[dim + block] = draw_scale(state);
  } else {
    for (int v = 0; v < dim; v += 4) {
      const uint64_t bits = next(state);
      // Four little-endian values, lowest first: the draw's bytes in order.
      if (kLittleEndian && !special_row && v + 4 <= dim) {
        memcpy(out + 2 * v, &bits, 8);
        continue;
      }
      for (int b = 0; b < 4 && v + b < dim; ++b) {
        const uint16_t drawn = static_cast<uint16_t>(bits >> (16 * b));
        const uint16_t special = bf16_special(drawn >> 1);
        const uint16_t value = special_row && (drawn & 1) ? special : drawn;
        out[2 * (v + b)] = static_cast<uint8_t>(value & 0xffu);
        out[2 * (v + b) + 1] = static_cast<uint8_t>(value >> 8);
      }
    }
  }
}

}  // namespace engram::fill
