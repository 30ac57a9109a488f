// Numbers the lookup benchmark reports: latency percentiles of replays and
// the copy floor a lookup is held against. Plain arithmetic, no GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"

namespace engram {

struct LatencyPercentiles {
  double p10_us = 0;
  double p50_us = 0;
  double p90_us = 0;
};

// Percentiles by linear interpolation between closest ranks (p * (n - 1)).
// kInvalidArgument for no samples or a negative or non-finite one.
Result<LatencyPercentiles> latency_percentiles(std::vector<double> samples_us);

// How many of `replays` timed replays draw `draw` of `draws` gets: the
// replays spread as evenly as they go, the first draws taking one more.
// Pre: 1 <= draws <= replays, 0 <= draw < draws; the draws sum to `replays`.
int replays_in_draw(int replays, int draws, int draw);

// The time a lookup's bytes need at the bandwidths of two same-run copies
// that move the same bytes as plain streams: `read_bytes` (every slot's row)
// read and `write_bytes` (every slot's bf16 output) written.
//   B_peer  = read_bytes / peer_copy_us                      (NVLink-bound)
//   B_local = (read_bytes + write_bytes) / local_copy_us     (HBM-bound)
//   floor   = max(remote_fraction * read_bytes / B_peer,
//                 (local_fraction * read_bytes + write_bytes) / B_local)
// The remote rows cross NVLink while the local rows and every output write
// use this GPU's HBM, concurrently, so the slower of the two bounds it.
// Fractions count slots (DEAD slots read nothing but are written).
struct CopyFloorInputs {
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
  double remote_fraction = 0;  // slots whose row lives on another GPU
  double local_fraction = 0;   // slots whose row lives on this GPU
  double local_copy_us = 0;
  double peer_copy_us = 0;
};
Result<double> copy_floor_us(const CopyFloorInputs& in);

}  // namespace engram
