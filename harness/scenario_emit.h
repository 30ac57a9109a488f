// A drawn swarm case as a scenario file (`fuzz --emit-scenario SEED`): the
// deployment, seed, faults and lookup the seed drew, and the outcome the run
// saw as its expectation, so a found bug becomes a regression test by
// redirecting the text into scenarios/. Run alone (`scenario run`), it gives
// the same trace hash as the seed did.
#pragma once

#include <string>

#include "core/base/status.h"
#include "harness/emulated_scenario.h"
#include "harness/swarm.h"

namespace engram::harness {

// `target` is what the case was drawn around (its file's deployment fields
// are copied as written); `out` is the case's run. Planned faults that never
// fired are left out: a scenario refuses a plan that tested nothing.
std::string swarm_case_scenario_yaml(uint64_t seed, const SwarmCase& drawn, const SwarmTarget& target,
                                     const EmulatedOutcome& out);

struct EmittedScenario {
  std::string yaml;
  uint64_t trace_hash = 0;  // the seed's run and the scenario's alone: equal
};

// Draws seed's case around `target`, runs it, writes it as a scenario and
// runs that alone: it must parse, pass and give the same trace hash, or the
// error (internal: an engramlab bug) says which and carries the yaml text.
// `fuzz --emit-scenario` and `scenario run --emit` both print this.
Result<EmittedScenario> emit_swarm_case(uint64_t seed, const SwarmTarget& target);

// A deployment as a deployment file reads it back (`plan --from ...
// --emit-deployment`, which tools/run.sh runs on the emulator): hosts,
// layout, config, the engine and its memory settings, the containers' limits.
std::string deployment_file_yaml(const Deployment& d);

// A scenario whose faults fire by rate (`faults.rates`: which visit fires is
// drawn from the seed) as the same file at `seed` with the outcome seen as
// its expectation, checked the same way. `scenario.fault_rates` must not be
// empty.
Result<EmittedScenario> emit_rated_scenario(const Scenario& scenario, uint64_t seed);

}  // namespace engram::harness
