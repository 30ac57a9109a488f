#include "sim/sim_step_clock.h"

#include <fmt/format.h>

#include <cmath>

#include "core/base/check.h"

namespace engram::sim {

SimStepClock::SimStepClock(SimContext& context, const StepPricer& pricer, int rank, RankStepTimes& out)
    : context_(context), pricer_(pricer), rank_(rank), out_(out) {
  ENGRAM_CHECK(pricer_ != nullptr);
}

void SimStepClock::begin_step(int64_t tokens, int64_t slot_tokens) {
  ENGRAM_CHECK_MSG(!open_, "a lookup step begun inside another");
  ENGRAM_CHECK(tokens >= 0 && slot_tokens >= 0);
  const double us = pricer_(rank_, tokens, slot_tokens, context_.slow_factors(rank_));
  ENGRAM_CHECK_MSG(std::isfinite(us) && us >= 0, "a step's model time is finite and not negative");
  // Whole microseconds on the clock: the rounded running sum, so rounding
  // never builds up over steps.
  model_total_us_ += us;
  const auto target_us = static_cast<SimTimeUs>(std::llround(model_total_us_));
  ENGRAM_CHECK(target_us >= out_.advanced_us);
  const SimTimeUs advance_us = target_us - out_.advanced_us;
  out_.advanced_us = target_us;
  Scheduler& scheduler = context_.scheduler();
  // The shortest text that reads back as the same double (the timeline reads it).
  ENGRAM_TRACE(scheduler, "lookup r{} {} tokens {} us", rank_, tokens, us);
  scheduler.sleep_for(advance_us);
  out_.step_us.push_back(us);
  own_end_us_ = scheduler.now_us();
  open_ = true;
}

void SimStepClock::end_step() {
  ENGRAM_CHECK_MSG(open_, "a lookup step ended that never began");
  open_ = false;
  Scheduler& scheduler = context_.scheduler();
  const SimTimeUs waited_us = scheduler.now_us() - own_end_us_;
  out_.waited_us.push_back(waited_us);
  scheduler.mark(fmt::format("lookup r{} waited {} us", rank_, waited_us));  // the timeline's, outside the hash
}

}  // namespace engram::sim
