// The JSON of an emulated run as `scenario run --json` and `fuzz --json`
// print it (README "Machine-readable output"), and as the Python module
// returns it (python/): one function each, so the two cannot drift.
#pragma once

#include "core/base/json_output.h"
#include "harness/emulated_scenario.h"
#include "harness/swarm.h"

namespace engram::harness {

// One entry of `scenario run --json`'s "scenarios": name, file, seed,
// result, placement(s), warnings, error, trace hash, step times per rank,
// ms, failures, the rank table of a failing run and the reproduce line.
Json scenario_outcome_json(const ScenarioOutcome& outcome);

// The whole `fuzz --json` document.
Json swarm_report_json(const SwarmReport& report);

// A scenario as `scenario run` runs it: one seed of the swarm for a file
// with `faults: drawn`, its own expectations otherwise.
ScenarioOutcome run_scenario_or_drawn(const Scenario& scenario, std::optional<uint64_t> seed_override,
                                      EmulatedOutcome* run = nullptr);

}  // namespace engram::harness
