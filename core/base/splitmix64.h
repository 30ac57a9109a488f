// splitmix64: the one seeded generator core uses (hash multipliers, table
// fill). Fixed arithmetic, so every platform and process draws the same
// numbers; core never includes sim/, which has its own copy for the emulator.
#pragma once

#include <cstddef>
#include <cstdint>

namespace engram {

inline uint64_t splitmix64_next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One draw from a state derived from `seed` and `index` without iterating
// (row i of a table gets its own stream).
inline uint64_t splitmix64_at(uint64_t seed, uint64_t index) {
  uint64_t state = seed ^ (index * 0xd1342543de82ef95ull);
  return splitmix64_next(state);
}

// Folds `values` into `running`, in order: a fingerprint that tells two
// sequences apart (equal sequences give equal results; order counts), not a
// secure hash. (Pointer and count: CUDA sources include this as C++17.)
inline uint64_t splitmix64_fold(uint64_t running, const int64_t* values, size_t count) {
  for (size_t i = 0; i < count; ++i) running = splitmix64_at(running, static_cast<uint64_t>(values[i]));
  return running;
}

}  // namespace engram
