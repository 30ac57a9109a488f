// Seeds for the emulator: one run seed split into named sub-seeds, so adding
// randomness in one part never shifts the draws of another.
#pragma once

#include <cstdint>
#include <string_view>

namespace engram::sim {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t fnv1a64(std::string_view bytes, uint64_t hash = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// The sub-seed for `purpose` ("scheduler", "faults", "topology", ...).
inline uint64_t sub_seed(uint64_t seed, std::string_view purpose) {
  uint64_t state = seed ^ fnv1a64(purpose);
  return splitmix64(state);
}

// Small, fast, reproducible generator (xoshiro-free to keep it obvious).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_); }
  // Uniform in [0, bound); bound > 0.
  uint64_t below(uint64_t bound) { return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64); }
  bool chance(double probability) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < probability; }

 private:
  uint64_t state_;
};

}  // namespace engram::sim
