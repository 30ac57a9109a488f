// `engramlab fuzz --file F --compare-engines`: the deployment run on the
// emulator under each engine's rules, faults drawn around it, two lines an
// engine (what ran, how the seeds ended). Where an engine's default cannot
// run there and `plan --compare-engines` plans it with another host layout
// (SGLang's `shared` memfd across nodes), that layout is what runs, and
// where it lacks a setting the file writes (vLLM: peer_shards), the
// deployment without it runs; its row says which. The main job
// (tools/run.sh) prints it under the plan comparison.
#pragma once

#include <cstdint>
#include <ostream>

#include "harness/swarm.h"

namespace engram::app {

// `target` holds a deployment (a --file). Exit code: 0 when every engine's
// seeds held the swarm's rules, 1 otherwise (the failures are listed with a
// line that reruns each).
int fuzz_compare_engines(const harness::SwarmTarget& target, uint64_t first_seed, int seeds, bool check_determinism,
                         std::ostream& out);

}  // namespace engram::app
