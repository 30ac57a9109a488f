// `plan --sweep tp=1,2,4,8 dp=1,2,4 tokens=1,1024 shm=64GiB,1TiB placement=all`:
// the deployment planned at every combination, each placement asked for in
// turn (or the engine's own choice), in a table: what the engine's defaults
// build there (*), whether the asked placement fits or why it is refused,
// the KV cache left, the host table bytes per node and the modelled step
// time (core/plan/step_time_plan.h) at each token count.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/deployment/deployment.h"
#include "core/placements/placement.h"

namespace engram::app {

struct SweepSpec {
  std::vector<int> tp, dp, tokens;
  std::vector<uint64_t> shm_bytes;       // empty: the deployment's
  std::vector<Placement> placements;     // empty: only the engine's own choice
};

// The words after --sweep: KEY=V1,V2,... for tp, dp, tokens, shm and
// placement (a name, "all" or "plan"); invalid_argument naming the word.
Result<SweepSpec> parse_sweep(const std::vector<std::string>& words, const Deployment& base);

// Plans every combination and prints the table (and, timed, the count and
// the seconds it took); with svg_path, writes the frontier there too
// (apps/plan_sweep_svg.h). Returns the exit code (0; 2 where the SVG cannot
// be written, saying why).
int run_sweep(const Deployment& base, const SweepSpec& spec, bool json, const std::string& svg_path = "");

}  // namespace engram::app
