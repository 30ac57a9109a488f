// What an emulated rank's lookup step costs in simulated time: the step
// model `plan` prints (core/plan/step_time_plan.h step_input_of, then the
// rank's placement's step_time hook, core/placements/step_cost.h) under the
// built-in constants of the deployment's GPU model, at the step's tokens and
// DP slot, with the slow factors a `slow` fault gave the rank. No second copy
// of the model: the emulator's clock and `plan` read the same function.
#pragma once

#include <cstdint>

#include "core/placements/step_cost.h"
#include "core/plan/deployment_plan.h"
#include "sim/faults.h"
#include "sim/sim_step_clock.h"

namespace engram::harness {

// The model's step of `rank` (a rank of `plan`) at `tokens` in a DP slot of
// `slot_tokens`, its links and GPU `slow` times slower.
StepTime emulated_step_time(const PlanResult& plan, const StepConstants& constants, int rank, int64_t tokens,
                            int64_t slot_tokens, const sim::SlowFactors& slow = {});

// emulated_step_time's time on the critical path, as the World's StepPricer
// (the plan copied in; the constants those of step_gpu_model).
sim::StepPricer emulated_step_pricer(const PlanResult& plan);

}  // namespace engram::harness
