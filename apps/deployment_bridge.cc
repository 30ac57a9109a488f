#include "apps/deployment_bridge.h"

#include <fmt/format.h>

#include "apps/engine_choice.h"
#include "backends/ipc/real_rank_backend.h"
#include "core/base/text_list.h"
#include "core/deployment/deployment_validate.h"
#include "core/model/hash_overrides.h"
#include "core/model/table_spec.h"

namespace engram::app {

void add_bridge_flags(CLI::App& cmd, BridgeFlags& flags, const std::string& gives) {
  cmd.add_option("--file", flags.file,
                 fmt::format("a deployment file (as `plan --file` reads): each process finds its host there by "
                             "hostname and fails naming every fact that differs{}",
                             gives.empty() ? std::string() : "; the file also gives " + gives));
  cmd.add_option("--host-map", flags.host_map,
                 "REAL=FILE[,REAL=FILE...]: the file's host name for each real hostname, where they differ");
}

Result<std::optional<DeploymentBridge>> load_bridge(const BridgeFlags& flags) {
  if (flags.file.empty()) {
    if (!flags.host_map.empty())
      return invalid_argument("--host-map: maps hostnames onto a deployment file's hosts; give --file too");
    return std::optional<DeploymentBridge>();
  }
  DeploymentBridge bridge;
  ENGRAM_ASSIGN_OR_RETURN(bridge.file, load_deployment_as_written(flags.file));
  ENGRAM_ASSIGN_OR_RETURN(bridge.host_map, parse_host_map(flags.host_map));
  auto rank_hosts = resolve_rank_hosts(bridge.file.deployment);
  if (!rank_hosts.is_ok())
    return invalid_argument(fmt::format("{}: {}", flags.file, rank_hosts.status().message()));
  bridge.rank_hosts = std::move(rank_hosts).value();
  // The engine `engramlab launch --engine` handed the ranks plans over the file's.
  Deployment& d = bridge.file.deployment;
  ENGRAM_ASSIGN_OR_RETURN(d.engine.profile, chosen_engine("", ipc::process_env(), d.engine.profile));
  return std::optional<DeploymentBridge>(std::move(bridge));
}

Status refuse_flags_beside_file(const CLI::App& cmd, std::span<const FlagTheFileGives> flags) {
  for (const FlagTheFileGives& f : flags) {
    if (cmd.count(f.flag) == 0) continue;
    return invalid_argument(fmt::format("{}: the deployment file gives this ({}); leave {} out, or edit the file",
                                        f.flag, f.file_field, f.flag));
  }
  return Status::ok();
}

FileCheck check_against_file(const DeploymentBridge& bridge, int rank, int world_size, bool check_world_size,
                             const ObservedHost& here) {
  FileCheck check;
  const Deployment& d = bridge.file.deployment;
  if (check_world_size && world_size != d.layout.world_size()) {
    check.comparison.differences.push_back(
        fmt::format("world size: the file's layout is tp {} x dp {} = {} ranks, the launcher started {}", d.layout.tp,
                    d.layout.dp, d.layout.world_size(), world_size));
  }
  // Placed by the file's rank -> host map only where the worlds agree.
  const bool by_rank = rank >= 0 && world_size == d.layout.world_size();
  auto match = match_host(bridge.file, by_rank ? std::span<const int>(bridge.rank_hosts) : std::span<const int>(),
                          bridge.host_map, by_rank ? rank : -1, here);
  if (!match.is_ok()) {
    check.error = match.status();
    return check;
  }
  check.host_index = match->host_index;
  for (std::string& line : match->differences) check.comparison.differences.push_back(std::move(line));
  check.comparison.append(host_differences(bridge.file.host(check.host_index), here));
  return check;
}

void print_file_check(std::FILE* to, const std::string& who, const DeploymentBridge& bridge, const FileCheck& check) {
  const std::string& file = bridge.file.source;
  if (!check.error.is_ok()) fmt::print(to, "{}differs from {}: {}\n", who, file, check.error.message());
  for (const std::string& line : check.comparison.differences) fmt::print(to, "{}differs from {}: {}\n", who, file, line);
  for (const std::string& line : check.comparison.not_checked) fmt::print(to, "{}{}\n", who, line);
  if (check.passed()) {
    fmt::print(to, "{}matches {}: hosts[{}] '{}', every fact it states{}\n", who, file, check.host_index,
               bridge.file.deployment.hosts[static_cast<size_t>(check.host_index)].name,
               check.comparison.not_checked.empty() ? "" : " that could be checked here");
  }
  std::fflush(to);
}

Json file_check_json(const DeploymentBridge* bridge, const FileCheck* check, std::span<const std::string> more) {
  if (bridge == nullptr || check == nullptr) return nullptr;
  Json j = Json::object();
  j["file"] = bridge->file.source;
  j["host"] = check->host_index < 0
                  ? Json(nullptr)
                  : Json(bridge->file.deployment.hosts[static_cast<size_t>(check->host_index)].name);
  j["host_index"] = check->host_index < 0 ? Json(nullptr) : Json(check->host_index);
  j["differences"] = Json::array();
  if (!check->error.is_ok()) j["differences"].push_back(check->error.message());
  for (const std::string& line : check->comparison.differences) j["differences"].push_back(line);
  for (const std::string& line : more) j["differences"].push_back(line);
  j["not_checked"] = check->comparison.not_checked;
  return j;
}

Status agree_on_file_check(Collectives& world, const FileCheck& mine, const std::string& file) {
  // -1: the host is not in the file; otherwise how many facts differ.
  const int32_t verdict =
      mine.error.is_ok() ? static_cast<int32_t>(mine.comparison.differences.size()) : int32_t{-1};
  std::vector<int32_t> all(static_cast<size_t>(world.size()));
  ENGRAM_RETURN_IF_ERROR(world.all_gather(std::as_bytes(std::span<const int32_t>(&verdict, 1)),
                                          std::as_writable_bytes(std::span<int32_t>(all))));
  std::vector<std::string> failed;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] == 0) continue;
    failed.push_back(all[r] < 0 ? fmt::format("rank {} (host not in the file)", r)
                                : fmt::format("rank {} ({} difference{})", r, all[r], all[r] == 1 ? "" : "s"));
  }
  if (failed.empty()) return Status::ok();
  return Status(ErrorCode::kFailedPrecondition,
                fmt::format("this cluster is not the one {} describes: {}; each rank printed its own differences, and "
                            "no table was built",
                            file, join_limited(failed, 8)),
                ErrorContext{.rank = world.world_rank(), .step = "deployment file check"});
}

Result<RuntimeOptions> runtime_options_from_file(const DeploymentBridge& bridge, const LaunchedRankFlags& flags,
                                                 const ipc::LaunchEnv& env) {
  const Deployment& d = bridge.file.deployment;
  // The flags' own reading (fill seed, and the table model when given); the
  // file then replaces what it gives.
  LaunchedRankFlags from_flags = flags;
  from_flags.tp_text = "0";
  from_flags.dp_text = "1";
  from_flags.model = d.model;
  from_flags.shard_group = "world";
  RuntimeOptions o;
  o.layout = d.layout;
  o.config = d.config;
  o.engine.profile = d.engine.profile;  // ENGRAMLAB_ENGINE, else the file's engine.name (load_bridge)
  o.placement_model = d.model;
  o.job_id = env.job_id;
  o.shm_name_part = env.shm_name_part;
  ENGRAM_ASSIGN_OR_RETURN(RuntimeOptions read, runtime_options_from(from_flags, env));
  o.fill_seed = read.fill_seed;
  if (flags.table_model.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(o.table_model, resolve_model(d.model, d.model_hash, bridge.file.source + ": model"));
  } else {
    o.table_model = std::move(read.table_model);
  }
  return o;
}

int ranks_per_gpu_from_file(const DeploymentBridge& bridge, const FileCheck& check) {
  if (check.host_index < 0) return 1;
  return bridge.file.deployment.hosts[static_cast<size_t>(check.host_index)].ranks_per_gpu;
}

Result<PlanResult> plan_of_file(const DeploymentBridge& bridge) {
  WarningSink sink;  // the plan's warnings are `plan --file`'s to show
  auto plan = plan_deployment(bridge.file.deployment, sink);
  if (!plan.is_ok())
    return Status(plan.status().code(), fmt::format("plan of {}: {}", bridge.file.source, plan.status().message()));
  return plan;
}

Result<ObserveOptions> launched_rank_observe_options(const ipc::LaunchEnv& env) {
  ENGRAM_ASSIGN_OR_RETURN(ipc::RealBackendOptions backend, ipc::real_backend_options(ipc::process_env()));
  ObserveOptions o;
  o.shm_dir = backend.shm_dir;
  o.every_gpu = false;
  o.own_gpu = env.local_rank;
  return o;
}

}  // namespace engram::app
