// Bit-exact ports of the numpy.random pieces the Engram reference draws its
// hash multipliers with: SeedSequence (numpy/random/bit_generator.pyx),
// PCG64 (numpy/random/src/pcg64), and the int64 bounded draws behind
// Generator.integers and RandomState.randint
// (numpy/random/_bounded_integers.pyx.in, src/distributions/distributions.c).
// tests/hashing_numpy_test.cc checks every piece against numpy itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace engram::numpy_random {

using uint128 = unsigned __int128;

// SeedSequence(entropy).generate_state(word_count, np.uint32) for a
// non-negative integer entropy, no spawn key, the default pool of 4 words.
std::vector<uint32_t> seed_sequence_words(uint128 entropy, int word_count);

// numpy.random.PCG64: the 128-bit LCG with the XSL-RR output.
class Pcg64 {
 public:
  // PCG64(entropy), as default_rng(entropy) builds it: SeedSequence state
  // words 0-1 seed the state, words 2-3 the increment.
  explicit Pcg64(uint128 entropy);

  uint64_t next64();
  // numpy halves 64-bit draws: the low 32 bits now, the high 32 bits at the
  // next call (a 64-bit draw in between leaves that half waiting).
  uint32_t next32();

  uint128 state() const { return state_; }
  uint128 increment() const { return increment_; }

 private:
  void step();

  uint128 state_ = 0;
  uint128 increment_ = 0;
  bool has_uint32_ = false;
  uint32_t uinteger_ = 0;
};

// How a bounded draw removes bias: Generator uses Lemire's multiply-and-
// reject, RandomState rejects draws masked to the range's bit width.
enum class BoundedMethod : uint8_t { kLemire, kMasked };

// `count` values in [low, high_exclusive), drawn as numpy draws them for
// dtype int64: Generator.integers(low, high, size=count, dtype=np.int64)
// with kLemire, RandomState(bit_generator).randint(...) with kMasked. Ranges
// that fit 32 bits draw 32-bit values (two per 64-bit draw), one of exactly
// 2^32 values takes them raw, and a range of one value draws nothing.
// Requires low < high_exclusive (numpy raises otherwise).
std::vector<int64_t> bounded_int64(Pcg64& generator, int64_t low, int64_t high_exclusive, size_t count,
                                   BoundedMethod method);

}  // namespace engram::numpy_random
