#include "harness/real_rank_process.h"

#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "backends/ranks/launched_rank_backend.h"
#include "backends/ipc/launch_env.h"
#include "backends/ipc/real_rank_backend.h"
#include "harness/crashing_shared_memory.h"
#include "core/base/file_replace.h"
#include "core/plan/deployment_plan.h"
#include "core/deployment/deployment_validate.h"
#include "harness/scenario.h"
#include "harness/scenario_rank.h"
#include "harness/scenario_rank_record.h"
#include "core/model/hash_overrides.h"
#include "core/model/table_spec.h"
#include "kernels/direct_table_reference.h"

namespace engram::harness {
namespace {

// Whether the scenario's own plan puts `rank` on the device: only then does
// the rank take a GPU (host placements run with more ranks than GPUs). The
// device side of the rule depends on the config alone, so the runtime,
// deciding from this machine's facts, agrees. Where plan refuses the
// deployment no GPU is opened; a runtime that still decides a device
// placement then fails naming the missing GPU.
bool scenario_places_on_device(const Deployment& completed, int rank) {
  WarningSink ignored;  // the runtime emits plan's warnings itself
  auto plan = plan_deployment(completed, ignored);
  return plan.is_ok() && rank < static_cast<int>(plan->ranks.size()) &&
         is_device_placement(plan->ranks[static_cast<size_t>(rank)].placement);
}

// Written whole under a fresh temporary name (O_EXCL, never a name planted
// in a shared result directory), then renamed: the launcher never reads half
// a record.
int write_record(const ScenarioRankFlags& flags, const ScenarioRankRecord& record) {
  const std::string line = format_rank_record(record) + "\n";
  if (flags.result_dir.empty()) {
    std::cout << line << std::flush;
  } else {
    const Status wrote = write_output_file(rank_result_path(flags.result_dir, record.rank), line,
                                         fmt::format("rank {}'s record", record.rank));
    if (!wrote.is_ok()) {
      std::fprintf(stderr, "rank %d: %s\n", record.rank, wrote.message().c_str());
      return 2;
    }
  }
  if (!record.status.is_ok())
    std::fprintf(stderr, "rank %d: FAILED: %s\n", record.rank, record.status.to_string().c_str());
  return record.status.is_ok() ? 0 : 1;
}

Status run_rank(const ScenarioRankFlags& flags, const ipc::LaunchEnv& env, ScenarioRankRecord& record,
                WarningSink& sink) {
  ENGRAM_ASSIGN_OR_RETURN(Scenario scenario, load_scenario_file(flags.file));
  auto completed = validate_and_complete(scenario.deployment);
  if (!completed.is_ok()) return std::move(completed).take_status().with_context(env.rank, -1, "scenario");
  if (completed->layout.world_size() != env.world_size)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("{}: the scenario's layout has {} ranks, but the launcher started {}; run it with "
                              "`engramlab launch -n {}`",
                              flags.file, completed->layout.world_size(), env.world_size,
                              completed->layout.world_size()),
                  {env.rank, -1, "scenario"});
  ENGRAM_ASSIGN_OR_RETURN(ModelSpec model,
                          resolve_model(scenario.lookup.model, scenario.lookup.model_hash, "lookup.model"));
  std::optional<CrashPoint> crash;
  if (!flags.die_at.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(crash, parse_crash_point(flags.die_at));
  }

  ENGRAM_ASSIGN_OR_RETURN(ipc::RealBackendOptions options, ipc::real_backend_options(ipc::process_env()));
  // The rank stands for its scenario host: the memory fit judges that host's
  // RAM (unless ENGRAMLAB_HOST_MEMORY says otherwise), as its /dev/shm and
  // hostname are made the scenario's before a real run; its memory cgroup
  // stays this process's own.
  const HostSpec& host =
      completed->hosts[static_cast<size_t>(completed->rank_hosts[static_cast<size_t>(env.rank)])];
  if (!options.host_memory_bytes) options.host_memory_bytes = host.host_memory_bytes;
  // Ranks share a GPU where the file says so (ranks_per_gpu, never inferred).
  ENGRAM_ASSIGN_OR_RETURN(auto rank,
                          ranks::LaunchedRankBackend::create(env, options, scenario_places_on_device(*completed, env.rank),
                                                             host.ranks_per_gpu, sink));
  RankBackend backend = rank->backend();
  std::unique_ptr<CrashingSharedMemory> crashing;
  if (crash && flags.die_rank == env.rank) {
    crashing = std::make_unique<CrashingSharedMemory>(*backend.shm, *crash);
    backend.shm = crashing.get();
  }

  const kernels::DirectTables& direct = scenario_direct_tables(scenario.lookup, model);
  ScenarioRankInputs inputs;
  inputs.options = scenario_runtime_options(*completed, model, env.job_id, env.shm_name_part);
  inputs.lookup = scenario.lookup;
  inputs.seed = scenario.seed;
  inputs.hashers = &direct.hashers;
  inputs.reference = [&direct](int table, const TableSpec& decoded_as, std::span<const int64_t> ids,
                                std::span<uint16_t> out) {
    direct.lookup(table, decoded_as, ids, out);
  };
  return run_scenario_rank(backend, inputs, sink, record.result);
}

}  // namespace

std::string rank_result_path(const std::string& result_dir, int rank) {
  return fmt::format("{}/rank-{}.json", result_dir, rank);
}

int run_scenario_rank_process(const ScenarioRankFlags& flags) {
  auto env = ipc::read_launch_env(ipc::process_env());
  if (!env.is_ok()) {
    std::fprintf(stderr, "engramlab scenario rank: launch environment: %s\n", env.status().to_string().c_str());
    return 2;
  }
  ScenarioRankRecord record;
  record.rank = env->rank;
  // Warnings go into the record (the launcher compares them), not to stderr.
  WarningSink sink;
  record.status = run_rank(flags, *env, record, sink);
  if (!record.status.is_ok()) record.status = std::move(record.status).with_rank(env->rank);
  record.warnings = sink.warnings();
  return write_record(flags, record);
}

}  // namespace engram::harness
