// How `engramlab plan` shows a PlanResult: a report for people (resolved
// config, placement per rank group, warnings, reasons, memory tables) and a
// JSON object for tools.
#pragma once

#include <string>

#include "core/base/json_output.h"
#include "core/plan/deployment_plan.h"

namespace engram {

std::string format_plan_report(const PlanResult& plan);
// The --json document (core/base/json_output.h): the same facts, null where
// a field does not apply to a rank's placement.
Json plan_json(const PlanResult& plan);

// "memory verdict ...": every limit host memory is held against, what is
// charged to it and the headroom (core/plan/memory_margins.h), and what the
// plan does not count; the JSON object {"margins": [...], "not_counted": [...]}.
std::string format_memory_verdict(const PlanResult& plan);
Json memory_verdict_json(const PlanResult& plan);

// "defaults used (not written by you):" and one line each; "" for none.
std::string format_defaults_used(const std::vector<DefaultUsed>& defaults);

// "202,758,032,400"
std::string with_thousands(uint64_t value);

}  // namespace engram
