// How `plan` shows step times (core/plan/step_time_plan.h): a table per
// placement group over the token counts (p50 us, exposed / hidden), the
// terms of the largest size, and the calibration used; and the same as JSON.
#pragma once

#include <string>

#include "core/base/json_output.h"
#include "core/plan/step_time_plan.h"

namespace engram {

std::string format_step_times(const PlanStepTimes& times);
Json step_times_json(const PlanStepTimes& times);

}  // namespace engram
