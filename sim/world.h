// The emulated world: hosts (HostSpec), ranks placed on them, a seed and a
// fault plan. run_world() gives every rank a RankBackend of emulator
// implementations (VMM, fd passing, /dev/shm, host probe, collectives), runs
// the body on all ranks under the seeded Scheduler and reports per-rank
// statuses, the trace hash, which faults fired, coverage probes, the ledger's
// leaks and one line that reproduces the run.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/backend/rank_backend.h"
#include "core/deployment/deployment.h"
#include "core/base/status.h"
#include "sim/faults.h"
#include "sim/ledger.h"
#include "sim/sim_context.h"

namespace engram::sim {

struct WorldSpec {
  std::vector<HostSpec> hosts;     // boot ids and GPU memory default as in deployment_validate
  std::vector<RankPlace> ranks;    // empty: one rank per GPU, hosts in order
  uint64_t seed = 1;
  FaultPlan faults;
  std::string reproduction;        // empty: "engramlab fuzz --seed <seed> --seeds 1"
  bool keep_trace_text = false;    // keep the event text (for diffing two runs)
};

struct WorldRun {
  std::vector<Status> statuses;      // per rank; a dead rank's says where it died
  std::vector<bool> died;            // per rank
  uint64_t trace_hash = 0;
  uint64_t scheduler_switches = 0;
  FaultReport faults;
  std::map<std::string, uint64_t, std::less<>> coverage;
  std::vector<LedgerEntry> leaks;    // everything live after every rank returned
  std::string reproduction;
  std::string trace_text;            // when keep_trace_text

  bool all_ok() const;
  int failed_rank_count() const;
  // "3 of 8 ranks failed; first: <status>; leaks: ...; reproduce: <line>"
  std::string summary() const;
};

using RankBody = std::function<Status(RankBackend& backend)>;

// Errors (invalid_argument) only for a malformed spec; rank failures are in
// the WorldRun.
Result<WorldRun> run_world(const WorldSpec& spec, const RankBody& body);

// Fills defaults (boot id "boot-<name>", GPU memory by model) and checks the
// spec: hosts exist, GPU indices in range, fault plan ranks in range.
Result<WorldSpec> complete_world_spec(WorldSpec spec);

// Topologies the tests and benchmarks use.
// `count` hosts named "<prefix><i>", each `gpus` GPUs of `model`, no NVLink domain.
std::vector<HostSpec> plain_hosts(const std::string& prefix, int count, int gpus, const std::string& model);
// GB300 NVL72 racks: per rack 18 hosts x 4 GPUs in NVLink domain "nvl72-rack<r>",
// IMEX channel present, FABRIC attribute set.
std::vector<HostSpec> gb300_nvl72_racks(int rack_count);
std::vector<RankPlace> one_rank_per_gpu(const std::vector<HostSpec>& hosts);

}  // namespace engram::sim
