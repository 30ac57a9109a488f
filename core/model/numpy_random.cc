#include "core/model/numpy_random.h"

#include <limits>

#include "core/base/status.h"

namespace engram::numpy_random {
namespace {

// SeedSequence's hashing constants (bit_generator.pyx).
constexpr int kPoolWords = 4;
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;

// The running constant changes on every call, so it is passed by reference.
uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// An integer's 32-bit words, least significant first; zero is one word.
std::vector<uint32_t> entropy_words(uint128 entropy) {
  std::vector<uint32_t> words;
  if (entropy == 0) words.push_back(0);
  while (entropy > 0) {
    words.push_back(static_cast<uint32_t>(entropy & 0xffffffffu));
    entropy >>= 32;
  }
  return words;
}

std::vector<uint32_t> seed_pool(uint128 entropy) {
  const std::vector<uint32_t> words = entropy_words(entropy);
  std::vector<uint32_t> pool(kPoolWords);
  uint32_t hash_const = kInitA;
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = hashmix(i < words.size() ? words[i] : 0u, hash_const);
  // Every word reaches every other, so late entropy changes early words too.
  for (size_t src = 0; src < pool.size(); ++src)
    for (size_t dst = 0; dst < pool.size(); ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
  for (size_t src = pool.size(); src < words.size(); ++src)
    for (size_t dst = 0; dst < pool.size(); ++dst) pool[dst] = mix(pool[dst], hashmix(words[src], hash_const));
  return pool;
}

constexpr uint128 kPcgMultiplier = (static_cast<uint128>(2549297995355413924ull) << 64) | 4865540595714422341ull;

uint64_t rotate_right(uint64_t value, unsigned by) { return (value >> by) | (value << ((64u - by) & 63u)); }

// The smallest all-ones mask covering `max` (RandomState's rejection).
uint64_t mask_covering(uint64_t max) {
  uint64_t mask = max;
  for (unsigned shift : {1u, 2u, 4u, 8u, 16u, 32u}) mask |= mask >> shift;
  return mask;
}

uint32_t lemire_uint32(Pcg64& g, uint32_t range_max) {
  ENGRAM_CHECK(range_max != 0xffffffffu);  // the caller draws raw 32-bit values then
  const uint32_t range = range_max + 1;
  uint64_t m = static_cast<uint64_t>(g.next32()) * range;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < range) {
    const uint32_t threshold = (std::numeric_limits<uint32_t>::max() - range_max) % range;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(g.next32()) * range;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

uint64_t lemire_uint64(Pcg64& g, uint64_t range_max) {
  ENGRAM_CHECK(range_max != std::numeric_limits<uint64_t>::max());
  const uint64_t range = range_max + 1;
  uint128 m = static_cast<uint128>(g.next64()) * range;
  uint64_t leftover = static_cast<uint64_t>(m);
  if (leftover < range) {
    const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - range_max) % range;
    while (leftover < threshold) {
      m = static_cast<uint128>(g.next64()) * range;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

std::vector<uint32_t> seed_sequence_words(uint128 entropy, int word_count) {
  ENGRAM_CHECK(word_count >= 0);
  const std::vector<uint32_t> pool = seed_pool(entropy);
  std::vector<uint32_t> out(static_cast<size_t>(word_count));
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t value = pool[i % pool.size()];
    value ^= hash_const;
    hash_const *= kMultB;
    value *= hash_const;
    value ^= value >> kXShift;
    out[i] = value;
  }
  return out;
}

Pcg64::Pcg64(uint128 entropy) {
  // generate_state(4, np.uint64): pairs of 32-bit words, little end first.
  const std::vector<uint32_t> w = seed_sequence_words(entropy, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = static_cast<uint64_t>(w[2 * i]) | (static_cast<uint64_t>(w[2 * i + 1]) << 32);
  const uint128 init_state = (static_cast<uint128>(v[0]) << 64) | v[1];
  const uint128 init_sequence = (static_cast<uint128>(v[2]) << 64) | v[3];
  // pcg_setseq_128_srandom_r.
  state_ = 0;
  increment_ = (init_sequence << 1) | 1u;
  step();
  state_ += init_state;
  step();
}

void Pcg64::step() { state_ = state_ * kPcgMultiplier + increment_; }

uint64_t Pcg64::next64() {
  step();
  const uint64_t high = static_cast<uint64_t>(state_ >> 64);
  const uint64_t low = static_cast<uint64_t>(state_);
  return rotate_right(high ^ low, static_cast<unsigned>(state_ >> 122));
}

uint32_t Pcg64::next32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uinteger_;
  }
  const uint64_t next = next64();
  has_uint32_ = true;
  uinteger_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

std::vector<int64_t> bounded_int64(Pcg64& g, int64_t low, int64_t high_exclusive, size_t count, BoundedMethod method) {
  ENGRAM_CHECK(low < high_exclusive);
  // numpy works on the closed range [low, high - 1] as an unsigned span. With
  // int64 bounds it stays below 2^64 - 1, so numpy's raw-64-bit branch for a
  // full span never applies.
  const uint64_t range_max = static_cast<uint64_t>(high_exclusive - 1) - static_cast<uint64_t>(low);
  const uint64_t offset = static_cast<uint64_t>(low);
  std::vector<int64_t> out(count);
  for (int64_t& value : out) {
    uint64_t drawn = 0;
    if (range_max == 0) {
      drawn = 0;
    } else if (range_max <= 0xffffffffu) {
      const auto max32 = static_cast<uint32_t>(range_max);
      if (max32 == 0xffffffffu) {
        drawn = g.next32();
      } else if (method == BoundedMethod::kMasked) {
        const auto mask = static_cast<uint32_t>(mask_covering(max32));
        uint32_t v = 0;
        while ((v = g.next32() & mask) > max32) {
        }
        drawn = v;
      } else {
        drawn = lemire_uint32(g, max32);
      }
    } else if (method == BoundedMethod::kMasked) {
      const uint64_t mask = mask_covering(range_max);
      uint64_t v = 0;
      while ((v = g.next64() & mask) > range_max) {
      }
      drawn = v;
    } else {
      drawn = lemire_uint64(g, range_max);
    }
    ENGRAM_CHECK(drawn <= range_max);
    value = static_cast<int64_t>(offset + drawn);
    ENGRAM_CHECK(value >= low && value < high_exclusive);
  }
  return out;
}

}  // namespace engram::numpy_random
