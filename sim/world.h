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
#include "sim/scheduler.h"
#include "sim/sim_context.h"
#include "sim/sim_step_clock.h"
#include "sim/sim_timeouts.h"

namespace engram::sim {

// The liveness bound: a run ends within this many of its longest timeout
// plus every stall its slow faults injected and every lookup step's time.
inline constexpr SimTimeUs kLivenessTimeouts = 8;

struct WorldSpec {
  std::vector<HostSpec> hosts;     // boot ids and GPU memory default as in deployment_validate
  std::vector<RankPlace> ranks;    // empty: one rank per GPU, hosts in order
  uint64_t seed = 1;
  FaultPlan faults;
  std::string reproduction;        // empty: "<this binary> fuzz --seed <seed> --seeds 1" (in a test: the test's line)
  bool keep_trace_text = false;    // keep the event text (for diffing two runs)
  bool keep_timeline = false;      // keep every event with its time and rank (drawing the run)
  SimTimeouts timeouts;
  // /dev/shm segments that stand for bigger tables than the small ones
  // really built (name -> the bytes tmpfs, cgroups and RAM account for):
  // the placement's sizes, at the cost of what a test writes.
  std::map<std::string, uint64_t, std::less<>> shm_modelled_bytes;
  // Prices each rank's lookup steps (sim/sim_step_clock.h): the ranks'
  // backends get a step clock that advances them by it. Empty: no step
  // clock (lookup steps take no simulated time).
  StepPricer step_pricer;
};

struct WorldRun {
  std::vector<Status> statuses;      // per rank; a dead rank's says where it died
  std::vector<bool> died;            // per rank
  uint64_t trace_hash = 0;
  uint64_t scheduler_switches = 0;
  SimTimeUs end_time_us = 0;         // simulated time when the last rank ended
  SimTimeUs liveness_bound_us = 0;   // the run must end by then
  uint64_t deadlocked_waits = 0;     // waits with no deadline that nothing could end
  uint64_t shm_remote_numa_maps = 0; // host-table maps by ranks on another socket than the copy
  FaultReport faults;
  std::map<std::string, uint64_t, std::less<>> coverage;
  std::vector<LedgerEntry> leaks;    // everything live after every rank returned
  std::string reproduction;
  std::string trace_text;            // when keep_trace_text
  std::vector<Scheduler::TimelineEvent> timeline;  // when keep_timeline
  std::vector<RankStepTimes> step_times;  // per rank, when the spec had a step pricer

  bool all_ok() const;
  // Every run ends, with success or a named error, within its bound in
  // simulated time, and no wait was left to deadlock detection.
  bool live() const;
  std::string liveness_text() const;
  int failed_rank_count() const;
  // "3 of 8 ranks failed; first: <status>; leaks: ...; reproduce: <line>"
  std::string summary() const;
};

using RankBody = std::function<Status(RankBackend& backend)>;

SimTimeUs liveness_bound_us(const WorldSpec& spec, SimTimeUs stalled_us);

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
// Every host's ranks in order: one per GPU, or ranks_per_gpu to each GPU.
std::vector<RankPlace> ranks_filling_gpus(const std::vector<HostSpec>& hosts);

}  // namespace engram::sim
