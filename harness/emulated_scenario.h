// Running a deployment on the emulator the way a real job runs it: `plan`
// first, then every rank does EngramRuntime::start, a lookup of its own
// tokens (hashed from deterministic token ids, a few DEAD), and stop. The
// outcome holds what both said (placements, warnings, the error, memory,
// handle type, lookup equality, leaks, faults, trace hash); run_scenario
// checks it against a scenario's expectations. harness/swarm.h uses the same run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/plan/deployment_plan.h"
#include "harness/emulator_memory.h"
#include "harness/scenario.h"
#include "harness/scenario_rank.h"
#include "harness/step_times.h"
#include "core/base/status.h"
#include "sim/faults.h"
#include "sim/world.h"

namespace engram::harness {

struct EmulatedJob {
  Deployment deployment;  // as written; plan completes it
  uint64_t seed = 1;
  sim::FaultPlan faults;
  ScenarioLookup lookup;
  std::string reproduction;  // printed with any failure
  bool keep_trace_text = false;
  // The memory this run may use; absent: machine_memory_limit() (tests set
  // it to check the refusal without a big machine).
  std::optional<MemoryLimit> memory_limit;
  bool keep_timeline = false;  // WorldRun::timeline, for --trace and --timeline
};

// What each rank reported (harness/scenario_rank.h: the same for real
// processes), including the hash of each table's lookup output bytes.
using RankOutcome = ScenarioRankResult;

struct EmulatedOutcome {
  Deployment deployment;              // completed (or as written when plan refused it)
  Result<PlanResult> plan = internal_error("not planned");
  sim::WorldRun world;
  std::vector<RankOutcome> ranks;
  std::vector<Warning> warnings;      // plan's and the world run's sink, deduped by key
  // The root cause: the first failing rank, following "rank P failed" links
  // to the rank that really failed. Absent when every rank succeeded.
  std::optional<Status> error;
  bool emulator_refused = false;      // run_world refused the spec, or it would not fit in memory (error holds why)
  EmulatorMemoryEstimate memory_estimate;  // made before anything was allocated
};

// Never fails: a plan error is kept in `plan` and the world still runs (the
// runtime must refuse it alike); a malformed world is reported in `error`.
EmulatedOutcome run_emulated_job(const EmulatedJob& job);

// "host_shared" when all ranks agree, else "device_peer x4, host_private x4";
// "-" when no placement was decided.
std::string placement_summary(const EmulatedOutcome& outcome);

struct ScenarioOutcome {
  std::string name;
  std::string source;
  uint64_t seed = 0;
  bool passed = false;
  std::vector<std::string> failures;  // what differed, one line each
  std::string placement;              // placement_summary
  std::vector<std::pair<Placement, int>> placements;  // the same as data (scenario_placement_counts)
  size_t warning_count = 0;
  std::vector<std::string> warning_texts;  // each warning once, as the user reads it
  std::vector<Warning> warnings;      // the same with their keys
  std::string error_kind = "-";
  std::string error_text;             // the root-cause status, when any
  std::optional<Status> error;        // the same as a value
  uint64_t trace_hash = 0;
  sim::FaultReport faults;
  std::map<std::string, uint64_t, std::less<>> coverage;
  // Each rank's lookup steps on the emulator's step clock (empty where the
  // run had no step model: plan refused it).
  std::vector<RankStepSummary> step_times;
  double elapsed_ms = 0;
  std::string reproduction;           // /abs/engramlab scenario run /abs/FILE --seed S (rerun_command)
  // On failure: rank, host, last step, status, one line for all ranks
  // alike ("ranks 0-8, 10-71  tray-0..tray-17 (18 hosts)  import  ...").
  std::vector<std::string> rank_table;
};

// The per-rank outcome table of a run (ScenarioOutcome::rank_table): ranks
// with the same last step and status on one line, folded into ranges.
std::vector<std::string> rank_outcome_table(const EmulatedOutcome& out);

// `seed_override` replaces the file's seed. `run`, when given, receives the
// emulated run (with its timeline) for drawing it. `memory_limit` replaces
// the machine's (EmulatedJob::memory_limit).
ScenarioOutcome run_scenario(const Scenario& scenario, std::optional<uint64_t> seed_override = std::nullopt,
                             EmulatedOutcome* run = nullptr, std::optional<MemoryLimit> memory_limit = std::nullopt);

// Converts the scenario's fault entries (names checked by the parser).
Result<sim::FaultPlan> fault_plan_of(const Scenario& scenario);

}  // namespace engram::harness
