// The decision every rank makes before it builds anything: the facts of
// every rank gathered (core/exchange/gather_facts.h carries host identity,
// NVLink domain and IMEX; this adds /dev/shm, RAM, memory limits and the
// GPU), the deployment they describe rebuilt in rank order and planned as
// `plan` plans it. Every rank decides alike from the same facts.
//
// Ranks handed one copy of the facts (the emulator's: all its ranks in one
// process) plan once: the plan is kept with the facts (GatheredFacts::
// derived), by the plan's inputs (core/runtime/plan_inputs.h). There is no
// process-wide cache: a real rank's facts are its own, so is its plan, and
// an emulated world's plan is freed with the facts its ranks let go of.
#pragma once

#include <memory>
#include <vector>

#include "core/backend/rank_backend.h"
#include "core/base/status.h"
#include "core/plan/deployment_plan.h"

namespace engram {

struct RuntimeOptions;  // core/runtime/engram_runtime.h

// What every rank reads from the plan, derived once per plan: the plan, per
// host its writer (lowest world rank), and per rank the reason of its
// placement group. Rank-sized lookups here keep a rank's start O(1) in the
// world size.
struct SharedPlan {
  Result<PlanResult> plan = internal_error("not planned");
  std::vector<int> host_writer_world_rank;
  std::vector<int> group_of_rank;  // index into plan->groups; -1 if none
};

// Collective over backend.world (one or two all-gathers). Errors: the
// gather's, with step "gather facts"; the plan's refusal, with step "decide
// placement"; both with this rank.
Result<std::shared_ptr<const SharedPlan>> gather_and_decide(RankBackend& backend, const RuntimeOptions& options);

}  // namespace engram
