// Checking a scenario's expectations against what a run's ranks reported,
// the same way wherever the ranks ran (the emulator, real processes): the
// root-cause error, plan and runtime agreeing, placements, warnings and
// lookups. Each check appends one line per difference to `failures`.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/plan/deployment_plan.h"
#include "harness/scenario.h"
#include "harness/scenario_rank.h"
#include "core/base/status.h"
#include "core/base/warnings.h"

namespace engram::harness {

// The root cause among failed ranks: `first_fault_rank` when it failed (the
// rank where an injected fault fired first; -1 for none); otherwise start at
// the lowest failed rank and follow "rank P failed" (unavailable naming a
// failed peer) to it. Absent when every rank succeeded.
std::optional<Status> scenario_root_cause(const std::vector<Status>& statuses, int first_fault_rank = -1);

// Rank r's placement: what the runtime decided when it started, else what
// plan decided; none when neither decided.
std::optional<Placement> decided_placement(const Result<PlanResult>& plan, const std::vector<ScenarioRankResult>& ranks,
                                           size_t rank);

// Plan and the runtime decided alike, as every run must (scenarios and the
// swarm): when plan refused the deployment no rank started and the runtime
// failed with the same kind (unless an injected fault fired, which may fail
// it first); otherwise every started rank placed as plan did and the runtime
// warned nothing plan did not.
void check_plan_matches_runtime(const Result<PlanResult>& plan, const std::optional<Status>& error,
                                const std::vector<ScenarioRankResult>& ranks, const std::vector<Warning>& warnings,
                                bool faults_fired, std::vector<std::string>& failures);

// "host_shared" when all ranks agree, else "device_peer x4, host_private x4";
// "-" when no placement was decided. Per rank: what the runtime decided, else
// what plan decided.
std::string scenario_placement_summary(const Result<PlanResult>& plan, const std::vector<ScenarioRankResult>& ranks);
// The same facts as data: each placement with how many ranks took it, in
// order of first appearance; empty when none was decided.
std::vector<std::pair<Placement, int>> scenario_placement_counts(const Result<PlanResult>& plan,
                                                                 const std::vector<ScenarioRankResult>& ranks);

// expect.error against the root cause (or success).
void check_scenario_error(const ScenarioExpect& expect, const std::optional<Status>& error,
                          std::vector<std::string>& failures);

// check_plan_matches_runtime; expect.placement; expect.warnings.
void check_scenario_decisions(const ScenarioExpect& expect, const Result<PlanResult>& plan,
                              const std::optional<Status>& error, const std::vector<ScenarioRankResult>& ranks,
                              const std::vector<Warning>& warnings, bool faults_fired,
                              std::vector<std::string>& failures);

// expect.handle_type (one for all ranks, or one per shard group): what the
// runtime agreed on, plan's prediction where no rank got that far; ranks
// that disagree are named once, as ranges.
void check_scenario_handle_types(const ScenarioExpect& expect, const Result<PlanResult>& plan,
                                 const std::vector<ScenarioRankResult>& ranks, std::vector<std::string>& failures);

// Any lookup mismatch, or ids that differ from the accepted sequence hashed
// whole, fails; expect.lookup_equal also demands every rank looked up, and
// expect.ids_equal_whole that every rank ran its steps and some ids were checked.
void check_scenario_lookups(const ScenarioExpect& expect, const std::vector<ScenarioRankResult>& ranks,
                            std::vector<std::string>& failures);

}  // namespace engram::harness
