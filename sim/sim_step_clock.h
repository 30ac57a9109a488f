// The emulator's clock for lookup steps (core/backend/step_clock.h): before
// a rank's step it stalls the rank by the step model's time for it (its
// placement, links, group, tokens, and the slow factors a `slow` fault gave
// it), priced by the WorldSpec's StepPricer; after the step it counts the
// time the rank then spent waiting on its peers (a collective ends with its
// slowest member). The scheduler's clock is whole microseconds: each rank
// advances by its model time summed and rounded, so over many steps the
// clock stays within 1 us of the model, while the step times it reports are
// the model's own figures.
#pragma once

#include <functional>
#include <vector>

#include "core/backend/step_clock.h"
#include "sim/faults.h"
#include "sim/scheduler.h"
#include "sim/sim_context.h"

namespace engram::sim {

// The model's time (us) of rank `rank`'s lookup step of `tokens` tokens in a
// DP slot of `slot_tokens`, its links and GPU `slow` times slower.
using StepPricer = std::function<double(int rank, int64_t tokens, int64_t slot_tokens, const SlowFactors& slow)>;

// One rank's lookup steps, in order.
struct RankStepTimes {
  std::vector<double> step_us;        // the model's time of each of its steps
  std::vector<SimTimeUs> waited_us;   // then waiting on its peers, on the clock
  SimTimeUs advanced_us = 0;          // what its steps moved the clock (their sum, rounded)
};

class SimStepClock final : public StepClock {
 public:
  // `out` outlives the clock (the World's run keeps it).
  SimStepClock(SimContext& context, const StepPricer& pricer, int rank, RankStepTimes& out);

  void begin_step(int64_t tokens, int64_t slot_tokens) override;
  void end_step() override;

 private:
  SimContext& context_;
  const StepPricer& pricer_;
  int rank_;
  RankStepTimes& out_;
  double model_total_us_ = 0;  // the model's times so far, unrounded
  SimTimeUs own_end_us_ = 0;   // when this rank's own part of the open step ended
  bool open_ = false;
};

}  // namespace engram::sim
