// Seconds since a steady-clock instant: the build phases' times that
// reports print (PlacementFootprint's fill and registration times).
#pragma once

#include <chrono>

namespace engram {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace engram
