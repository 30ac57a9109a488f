// A plan's step time: for each placement group the plan decided, the model's
// time of one lookup step of one layer on its ranks (core/placements/step_cost.h)
// at each asked token count, under the plan's engine's rules and a GPU
// model's constants.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/plan/deployment_plan.h"
#include "core/placements/step_cost.h"

namespace engram {

struct PlacementStepRow {
  Placement placement = Placement::kDeviceCollective;
  std::string ranks_text;
  int group_size = 1;
  LinkKind group_link = LinkKind::kNvlink;
  int tp = 1;
  std::vector<int> tokens;
  std::vector<StepTime> times;  // one per token count
};

struct PlanStepTimes {
  std::string engine;
  std::string rules_source;
  std::string calibration;
  std::string gpu_model;
  std::vector<PlacementStepRow> rows;
};

// The GPU model a deployment's steps are priced for: its first host's (H200
// where the deployment names no host); `plan` and engramlab.plan agree on it.
std::string step_gpu_model(const Deployment& deployment);

// The links of a group: NVLink inside a host or across hosts of one NVLink
// domain, the network otherwise.
PlanStepTimes plan_step_times(const PlanResult& plan, const StepConstants& constants, std::span<const int> tokens);

// The step input of `rank` of `plan` at `tokens` (the emulator prices its
// steps with it too).
StepCostInput step_input_of(const PlanResult& plan, const RankPlan& rank, int tokens);

// The slowest rank's step time at `tokens` over the plan, in microseconds
// (the p50 the sweep and the engine comparison show).
double plan_step_time_us_max(const PlanResult& plan, const StepConstants& constants, int tokens);

}  // namespace engram
