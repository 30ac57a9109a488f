// A scenario file whose faults are drawn (`faults: drawn`): its deployment,
// lookup and timeouts fixed, the seed drawing the faults, interleavings and
// the timeouts it leaves open, exactly as one seed of `fuzz --file FILE`.
// It has no expectation of its own: the swarm's rules are what it checks.
#pragma once

#include <cstdint>
#include <optional>

#include "harness/emulated_scenario.h"
#include "harness/scenario.h"

namespace engram::harness {

// `scenario.faults_drawn` must hold. `run`, when given, receives the drawn
// case's run with its timeline (for --trace / --timeline).
ScenarioOutcome run_drawn_scenario(const Scenario& scenario, std::optional<uint64_t> seed_override,
                                   EmulatedOutcome* run = nullptr);

}  // namespace engram::harness
