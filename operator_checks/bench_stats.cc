#include "operator_checks/bench_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/base/check.h"

namespace engram {

Result<LatencyPercentiles> latency_percentiles(std::vector<double> samples_us) {
  if (samples_us.empty()) return invalid_argument("latency_percentiles: no samples; time at least one replay");
  for (double s : samples_us) {
    if (!std::isfinite(s) || s < 0) {
      return invalid_argument(fmt::format("latency_percentiles: sample {} us is not a finite time >= 0", s));
    }
  }
  std::sort(samples_us.begin(), samples_us.end());
  auto at = [&](double p) {
    const double rank = p * static_cast<double>(samples_us.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(rank));
    const size_t hi = std::min(lo + 1, samples_us.size() - 1);
    return samples_us[lo] + (samples_us[hi] - samples_us[lo]) * (rank - static_cast<double>(lo));
  };
  LatencyPercentiles out;
  out.p10_us = at(0.10);
  out.p50_us = at(0.50);
  out.p90_us = at(0.90);
  ENGRAM_CHECK(out.p10_us <= out.p50_us && out.p50_us <= out.p90_us);
  return out;
}

Result<double> copy_floor_us(const CopyFloorInputs& in) {
  if (in.read_bytes == 0) return invalid_argument("copy_floor_us: read_bytes is 0; a lookup of no rows has no floor");
  const bool fractions_ok = in.remote_fraction >= 0 && in.local_fraction >= 0 &&
                            in.remote_fraction + in.local_fraction <= 1.0 + 1e-9;
  if (!fractions_ok) {
    return invalid_argument(fmt::format("copy_floor_us: remote_fraction {} and local_fraction {} must be >= 0 and "
                                        "sum to at most 1", in.remote_fraction, in.local_fraction));
  }
  if (!(in.local_copy_us > 0) || !(in.peer_copy_us > 0)) {
    return invalid_argument(fmt::format("copy_floor_us: copy times {} us (local) and {} us (peer) must be positive",
                                        in.local_copy_us, in.peer_copy_us));
  }
  const double read = static_cast<double>(in.read_bytes);
  const double write = static_cast<double>(in.write_bytes);
  const double remote_us = in.remote_fraction * in.peer_copy_us;  // remote_fraction * read / (read / peer_us)
  const double local_us = (in.local_fraction * read + write) / (read + write) * in.local_copy_us;
  return std::max(remote_us, local_us);
}

int replays_in_draw(int replays, int draws, int draw) {
  ENGRAM_CHECK(draws >= 1 && draws <= replays && draw >= 0 && draw < draws);
  const int share = replays / draws + (draw < replays % draws ? 1 : 0);
  ENGRAM_CHECK(share >= 1);
  return share;
}

}  // namespace engram
