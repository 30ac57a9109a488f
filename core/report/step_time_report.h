// How `plan` shows step times (core/plan/step_time_plan.h): a table per
// placement group over the token counts (p50 us, exposed / hidden), the
// terms of the largest size, and the calibration used; and the same as JSON.
#pragma once

#include <span>
#include <string>

#include "core/base/json_output.h"
#include "core/plan/memory_fit.h"
#include "core/plan/step_time_plan.h"

namespace engram {

std::string format_step_times(const PlanStepTimes& times);
Json step_times_json(const PlanStepTimes& times);

// The document `engramlab plan --json` prints and engramlab.plan returns, one
// function so the two cannot drift: the plan, its step times at `tokens` under
// `constants`, `calibration_fit` (null where no bench file was fitted) and the
// memory-fit error (null when the tables fit).
Json plan_document(const FitCheckedPlan& checked, const StepConstants& constants, std::span<const int> tokens,
                   Json calibration_fit);

}  // namespace engram
