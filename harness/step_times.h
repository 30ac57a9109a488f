// A run's lookup step times per rank (sim/sim_step_clock.h): each rank's
// steps summarised (p50, max, and the time it then waited on its peers),
// ranks alike folded into ranges for the report, and expect.step_time_us_max
// checked against them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "harness/scenario.h"
#include "sim/sim_step_clock.h"

namespace engram::harness {

struct RankStepSummary {
  int rank = 0;
  size_t steps = 0;
  double p50_us = 0;  // the model's time of its own steps: lower median
  double max_us = 0;
  sim::SimTimeUs waited_max_us = 0;    // the longest it then waited on its peers in one step
  sim::SimTimeUs waited_total_us = 0;
};

// One summary per rank of `times` (a rank without steps has steps = 0).
std::vector<RankStepSummary> summarize_step_times(const std::vector<sim::RankStepTimes>& times);

// Ranks whose summaries are equal, in order of their first rank.
struct StepTimeGroup {
  std::vector<int> ranks;
  RankStepSummary summary;  // the first rank's
};
std::vector<StepTimeGroup> fold_step_times(const std::vector<RankStepSummary>& summaries);

// "ranks 0-1, 3: 4 steps, p50 7.306 us, max 7.306 us, waited max 0 us", one line per group.
std::vector<std::string> step_time_lines(const std::vector<RankStepSummary>& summaries);

// expect.step_time_us_max against the summaries: one line per rank over a
// bound (naming the rank, its time, the bound and the others'), and per
// entry whose ranks timed no step.
void check_step_times(const std::vector<ExpectedStepTime>& expected, const std::vector<RankStepSummary>& summaries,
                      std::vector<std::string>& failures);

}  // namespace engram::harness
