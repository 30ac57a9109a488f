// A device graph's replays as the acceptance test and the bench report
// them: `warmup` untimed, then `replays` timed back to back, as
// p10/p50/p90 in microseconds (operator_checks/bench_stats.h).
#pragma once

#include <functional>

#include "core/backend/device_compute.h"
#include "core/base/status.h"
#include "operator_checks/bench_stats.h"

namespace engram::operator_checks {

inline Result<LatencyPercentiles> time_replays(DeviceGraph& graph, int warmup, int replays) {
  ENGRAM_ASSIGN_OR_RETURN(std::vector<double> us, graph.time(warmup, replays));
  return latency_percentiles(std::move(us));
}

// Captures what `enqueue` enqueues once, then times its replays.
inline Result<LatencyPercentiles> capture_and_time(DeviceCompute& compute,
                                                   const std::function<Status(StreamRef)>& enqueue, int warmup,
                                                   int replays) {
  ENGRAM_ASSIGN_OR_RETURN(auto graph, compute.capture(enqueue));
  return time_replays(*graph, warmup, replays);
}

}  // namespace engram::operator_checks
