// What an emulated run will cost in this process's memory, estimated before
// anything is allocated, and what the machine lets this process have. Every
// emulated rank lives in this one process (sim/world.h), so a run of N ranks
// holds N ranks' lookup buffers at once; run_emulated_job compares the two
// and refuses a run that cannot fit (resource_exhausted) instead of being
// OOM-killed part way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/deployment/deployment.h"
#include "core/model/table_spec.h"
#include "core/base/status.h"
#include "harness/lookup_steps.h"
#include "harness/scenario.h"

namespace engram::harness {

struct EmulatorMemoryEstimate {
  int ranks = 0;
  uint64_t per_rank_bytes = 0;  // the largest rank's
  uint64_t fixed_bytes = 0;     // once per run, whatever the ranks
  uint64_t total_bytes = 0;     // fixed + per rank x ranks
  int lookup_tokens = 0;        // the most tokens a rank looks up in one step
};

// An upper bound (calibrated against VmHWM, within about 2x) of the memory a
// run of `deployment` (completed: rank_hosts resolved) adds to this process,
// looking up `lookup` in `model` (the small tables really built).
// `any_device_collective`: some rank may take device_collective (or plan did
// not say), whose workspace is the largest term. `ranks_per_table_copy`:
// the fewest ranks that hold one copy of the tables between them (a row-shard
// group; 1 when the plan does not say).
EmulatorMemoryEstimate estimate_emulator_memory(const Deployment& deployment, const ModelSpec& model,
                                                const ScenarioLookup& lookup, bool any_device_collective,
                                                int ranks_per_table_copy = 1);

// What lookup.steps take compiled (one copy for every rank of the run):
// `split: every` over P CP ranks is up to kMaxEverySplits ops of P shards.
uint64_t compiled_steps_bytes(const LookupSteps& steps, int prefill_cp);

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo", "memory cgroup <dir> (limit - usage)", ...
};

// The least of MemAvailable, the memory cgroup's headroom and RLIMIT_AS;
// nullopt when none can be read.
std::optional<MemoryLimit> machine_memory_limit();

// ok when the estimate fits the limit, else resource_exhausted naming the
// estimate, the per-rank figure, the limit and its source, and the fix.
Status check_emulator_memory(const EmulatorMemoryEstimate& estimate, const MemoryLimit& limit);

}  // namespace engram::harness
