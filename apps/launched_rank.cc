#include "apps/launched_rank.h"

#include <climits>
#include <cstdint>
#include <fmt/format.h>

#include "apps/engine_choice.h"
#include "apps/flag_numbers.h"
#include "apps/flag_spellings.h"
#include "core/base/text_excerpt.h"
#include "core/deployment/deployment.h"
#include "core/deployment/shard_groups.h"
#include "core/engines/engine_profile.h"
#include "core/model/table_spec.h"
#include "core/placements/placement.h"
#include "backends/ranks/launched_rank_backend.h"

namespace engram::app {

void add_launched_rank_flags(CLI::App& cmd, LaunchedRankFlags& flags) {
  cmd.add_option("--model", flags.model, "the model whose tables are placed (default deepseek-v4.1-flash)");
  cmd.add_option("--table-model", flags.table_model,
                 "build and look up this model's tables instead (e.g. tiny, for a quick check); the placement still "
                 "follows --model");
  cmd.add_option(kTpSpelling.names, flags.tp_text,
                 spelled(fmt::format("tensor-parallel size (default {}; 0: WORLD_SIZE / dp)", flags.tp_text), kTpSpelling));
  cmd.add_option(kDpSpelling.names, flags.dp_text,
                 spelled(fmt::format("data-parallel size (default {}; 0: WORLD_SIZE / tp)", flags.dp_text), kDpSpelling));
  cmd.add_option("--shard-group", flags.shard_group, fmt::format("{} (default world)", shard_group_choices()));
  cmd.add_option("--placement", flags.placement,
                 "force a registered placement on every rank (config.placement), e.g. device_head_sharded; default: "
                 "the rules decide");
  cmd.add_option("--fill-seed", flags.fill_seed_text, "the table fill's seed (default 1)");
  cmd.add_option("--ranks-per-gpu", flags.ranks_per_gpu_text,
                 fmt::format("ranks sharing one GPU (default 1: a GPU per rank; up to {}): LOCAL_RANK r opens GPU r / "
                             "N; device_peer and host placements run so, device_collective (NCCL) refuses it",
                             kMaxRanksPerGpu));
  cmd.add_option("--engine", flags.engine,
                 fmt::format("whose rules plan the ranks: {} (default: ENGRAMLAB_ENGINE, which `engramlab launch "
                             "--engine` sets, else engramlab)",
                             engine_names_text()));
}

Result<int> ranks_per_gpu_from(const LaunchedRankFlags& f) {
  return whole_number_flag<int>("--ranks-per-gpu", f.ranks_per_gpu_text, 1, kMaxRanksPerGpu);
}

Result<RuntimeOptions> runtime_options_from(const LaunchedRankFlags& f, const ipc::LaunchEnv& env) {
  RuntimeOptions o;
  ENGRAM_ASSIGN_OR_RETURN(int tp, whole_number_flag<int>("--tp", f.tp_text, 0, env.world_size));
  ENGRAM_ASSIGN_OR_RETURN(int dp, whole_number_flag<int>("--dp", f.dp_text, 0, env.world_size));
  ENGRAM_ASSIGN_OR_RETURN(o.fill_seed, whole_number_flag<uint64_t>("--fill-seed", f.fill_seed_text, 0, UINT64_MAX));
  ENGRAM_ASSIGN_OR_RETURN(o.layout, ranks::launched_layout(tp, dp, env.world_size, "--tp", "--dp"));
  o.placement_model = f.model;
  ENGRAM_ASSIGN_OR_RETURN(o.table_model, model_preset(f.table_model.empty() ? f.model : f.table_model));
  const std::optional<ShardGroup> group = shard_group_from_name(f.shard_group);
  if (!group)
    return invalid_argument(fmt::format("--shard-group: '{}' is not a shard group; write {}", excerpt(f.shard_group),
                                        shard_group_choices()));
  o.config.shard_group = *group;
  if (!f.placement.empty()) {
    auto known = parse_placement(f.placement);
    if (!known.is_ok()) return invalid_argument(fmt::format("--{}", known.status().message()));
    o.config.placement = f.placement;
  }
  ENGRAM_ASSIGN_OR_RETURN(o.engine.profile, chosen_engine(f.engine, ipc::process_env(), std::nullopt));
  o.job_id = env.job_id;
  o.shm_name_part = env.shm_name_part;
  return o;
}

Status run_launched_rank(const ipc::LaunchEnv& env, int ranks_per_gpu, WarningSink& sink,
                         const std::function<Status(RankBackend&)>& body) {
  ENGRAM_ASSIGN_OR_RETURN(auto rank, ranks::LaunchedRankBackend::create(env, ranks_per_gpu, sink));
  return body(rank->backend());
}

}  // namespace engram::app
