// How `engramlab plan` shows a PlanResult: a report for people (resolved
// config, placement per rank group, warnings, reasons, memory tables) and a
// JSON object for tools.
#pragma once

#include <string>

#include "core/plan/deployment_plan.h"

namespace engram {

std::string format_plan_report(const PlanResult& plan);
std::string plan_to_json(const PlanResult& plan);

// "202,758,032,400"
std::string with_thousands(uint64_t value);

}  // namespace engram
