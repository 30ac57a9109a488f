// The time of a rank's lookup steps where time is simulated: the emulator's
// clock (sim/sim_step_clock.h) advances a rank by the step model's time for
// its step (core/placements/step_cost.h), so a slow link or a straggler
// shows as latency. A real machine has none: its steps take what they take.
#pragma once

#include <cstdint>

namespace engram {

class StepClock {
 public:
  virtual ~StepClock() = default;
  // Before the rank's lookup step of `tokens` tokens in a DP slot of
  // `slot_tokens`: the rank spends the model's time of its own step.
  virtual void begin_step(int64_t tokens, int64_t slot_tokens) = 0;
  // After the step's lookup returned: the time since its own part ended was
  // spent waiting on its peers (the step's collectives end with the slowest).
  virtual void end_step() = 0;
};

}  // namespace engram
