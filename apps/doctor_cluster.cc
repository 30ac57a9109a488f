#include "apps/doctor_cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/ipc/real_rank_backend.h"
#include "backends/ipc/tcp_collectives.h"
#include "core/base/size_text.h"
#include "core/base/text_list.h"
#include "core/exchange/gather_strings.h"
#include "core/model/gpu_models.h"

namespace engram::app {
namespace {

// Every rank's facts, on every rank, in rank order.
Result<std::vector<ObservedHost>> gather_hosts(const ipc::LaunchEnv& env, const ObservedHost& mine) {
  ENGRAM_ASSIGN_OR_RETURN(ipc::RealBackendOptions backend, ipc::real_backend_options(ipc::process_env()));
  ipc::TcpCollectivesOptions options = ipc::collectives_options(env);
  options.join_timeout = backend.join_timeout;
  options.op_timeout = backend.op_timeout;
  auto world = ipc::TcpCollectives::join(options);
  if (!world.is_ok()) {
    return Status(world.status().code(),
                  world.status().message() + " (`doctor --local` reads this process's host alone, without the job)",
                  world.status().context());
  }
  ENGRAM_ASSIGN_OR_RETURN(std::vector<std::string> texts,
                          all_gather_strings(**world, dump_json(observed_host_json(mine))));
  std::vector<ObservedHost> hosts;
  for (size_t r = 0; r < texts.size(); ++r) {
    const Json j = Json::parse(texts[r], nullptr, false);
    auto host = j.is_discarded() ? Result<ObservedHost>(invalid_argument("host facts: not JSON"))
                                 : observed_host_from_json(j);
    if (!host.is_ok())
      return Status(host.status().code(), fmt::format("rank {}'s {}", r, host.status().message()),
                    ErrorContext{.rank = env.rank, .peer = static_cast<int>(r), .step = "doctor facts"});
    hosts.push_back(std::move(host).value());
  }
  return hosts;
}

// Every difference between the cluster and the file, each host's facts once.
struct ClusterFileCheck {
  std::vector<std::string> differences;
  std::vector<std::string> not_checked;
};

ClusterFileCheck check_cluster(const DeploymentBridge& bridge, std::span<const ObservedHost> by_rank,
                               std::span<const ClusterHost> hosts) {
  ClusterFileCheck out;
  const int world = static_cast<int>(by_rank.size());
  // The file's rank -> host map holds only where the job is the file's world.
  const bool by_rank_map = world == bridge.file.deployment.layout.world_size();
  std::vector<int> host_index_by_rank(by_rank.size(), -1);
  for (const ClusterHost& host : hosts) {
    bool compared = false;
    for (int r : host.ranks) {
      auto match = match_host(bridge.file,
                              by_rank_map ? std::span<const int>(bridge.rank_hosts) : std::span<const int>(),
                              bridge.host_map, by_rank_map ? r : -1, by_rank[static_cast<size_t>(r)]);
      if (!match.is_ok()) {
        out.differences.push_back(match.status().message());
        break;  // the host's other ranks would say the same
      }
      host_index_by_rank[static_cast<size_t>(r)] = match->host_index;
      for (std::string& line : match->differences) out.differences.push_back(std::move(line));
      if (compared) continue;
      compared = true;
      FactsComparison facts = host_differences(bridge.file.host(match->host_index), host.facts);
      for (std::string& line : facts.differences) out.differences.push_back(std::move(line));
      for (std::string& line : facts.not_checked) out.not_checked.push_back(std::move(line));
    }
  }
  for (std::string& line : nvlink_domain_differences(bridge.file, host_index_by_rank, by_rank))
    out.differences.push_back(std::move(line));
  return out;
}

std::string gpu_cell(const ClusterHost& h) {
  const ObservedGpu* gpu = first_readable_gpu(h.facts);
  if (gpu == nullptr) return h.facts.gpu_count == 0 ? "none" : "unreadable";
  return gpu_model_of_device_name(gpu->device_name);
}

// One row per host.
std::string cluster_table(std::span<const ClusterHost> hosts) {
  const std::vector<std::string> header = {"host", "ranks", "GPUs", "GPU", "GPU memory", "RAM", "/dev/shm",
                                           "IMEX", "NVLink domain", "environment", "memory limit"};
  std::vector<std::vector<std::string>> rows;
  for (const ClusterHost& h : hosts) {
    const ObservedHost& f = h.facts;
    const ObservedGpu* gpu = first_readable_gpu(f);
    rows.push_back({f.hostname, compress_ranges(h.ranks),
                    h.one_gpu_per_rank ? fmt::format("{} (1 a rank)", h.gpu_count) : std::to_string(h.gpu_count),
                    gpu_cell(h), gpu ? format_size_short(gpu->memory_bytes_total) : "-",
                    f.host_memory_bytes ? format_size_short(*f.host_memory_bytes) : "unknown",
                    f.shm_mounted ? format_size_short(f.shm_total_bytes) : "none",
                    f.imex_channels.empty() ? "no" : "yes",
                    gpu && !gpu->nvlink_domain.empty() ? gpu->nvlink_domain : "none",
                    runtime_environment_name(f.environment),
                    f.memory_limit_bytes ? format_size_short(*f.memory_limit_bytes) : "none"});
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) text += fmt::format("{}{:<{}}", c == 0 ? "" : "  ", cells[c], width[c]);
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

Json cluster_json(const ipc::LaunchEnv& env, const ObservedHost& mine, std::span<const ClusterHost> hosts,
                  const std::string& yaml, const DeploymentBridge* bridge, const ClusterFileCheck* check,
                  const Status& error) {
  Json j = json_document("doctor");
  j["rank"] = env.rank;
  j["world_size"] = env.world_size;
  j["host"] = observed_host_json(mine);
  j["cluster"] = nullptr;
  if (env.rank == 0 && error.is_ok()) {
    Json cluster = Json::object();
    cluster["hosts"] = Json::array();
    for (const ClusterHost& h : hosts) {
      cluster["hosts"].push_back({{"name", h.facts.hostname},
                                  {"ranks", h.ranks},
                                  {"gpu_count", h.gpu_count},
                                  {"one_gpu_per_rank", h.one_gpu_per_rank},
                                  {"facts", observed_host_json(h.facts)}});
    }
    cluster["deployment_yaml"] = yaml;
    j["cluster"] = std::move(cluster);
  }
  j["file_check"] = nullptr;
  if (bridge != nullptr && check != nullptr)
    j["file_check"] = {{"file", bridge->file.source}, {"differences", check->differences},
                       {"not_checked", check->not_checked}};
  j["warnings"] = Json::array();
  j["error"] = error_json_or_null(error);
  return j;
}

}  // namespace

Result<std::optional<ipc::LaunchEnv>> doctor_launch_env(bool local) {
  const ipc::EnvLookup env = ipc::process_env();
  if (local || (!env("RANK") && !env("OMPI_COMM_WORLD_RANK") && !env("SLURM_PROCID")))
    return std::optional<ipc::LaunchEnv>();
  auto launch = ipc::read_launch_env(env);
  if (!launch.is_ok()) {
    return invalid_argument(launch.status().message() +
                            " (`doctor --local` reads this process's host alone, without the job)");
  }
  if (launch->world_size < 2) return std::optional<ipc::LaunchEnv>();
  return std::optional<ipc::LaunchEnv>(std::move(launch).value());
}

Result<ObserveOptions> doctor_observe_options(const std::optional<ipc::LaunchEnv>& env) {
  if (env) return launched_rank_observe_options(*env);
  ENGRAM_ASSIGN_OR_RETURN(ipc::RealBackendOptions backend, ipc::real_backend_options(ipc::process_env()));
  ObserveOptions o;
  o.shm_dir = backend.shm_dir;
  o.every_gpu = true;
  return o;
}

int run_doctor_cluster(const ipc::LaunchEnv& env, const ObservedHost& mine, const DoctorClusterOptions& options) {
  auto gathered = gather_hosts(env, mine);
  if (!gathered.is_ok()) {
    fmt::print(stderr, "engramlab doctor: rank {}: {}\n", env.rank, gathered.status().to_string());
    if (options.json) fmt::print("{}\n", dump_json(cluster_json(env, mine, {}, "", nullptr, nullptr, gathered.status())));
    return 1;
  }
  const std::vector<ObservedHost>& by_rank = *gathered;
  const std::vector<ClusterHost> hosts = cluster_hosts(by_rank);
  const std::string yaml = cluster_hosts_yaml(hosts);
  std::optional<ClusterFileCheck> check;
  if (options.bridge != nullptr) check = check_cluster(*options.bridge, by_rank, hosts);
  Status verdict = Status::ok();
  if (check && !check->differences.empty()) {
    verdict = Status(ErrorCode::kFailedPrecondition,
                     fmt::format("this cluster is not the one {} describes: {} difference{}",
                                 options.bridge->file.source, check->differences.size(),
                                 check->differences.size() == 1 ? "" : "s"),
                     ErrorContext{.rank = env.rank, .step = "deployment file check"});
  }
  if (options.json) {
    fmt::print("{}\n", dump_json(cluster_json(env, mine, hosts, yaml, options.bridge, check ? &*check : nullptr,
                                              verdict)));
  } else if (env.rank == 0) {
    if (!options.yaml_only) {
      fmt::print("engramlab doctor: {} ranks on {} host{}\n\n{}\n", env.world_size, hosts.size(),
                 hosts.size() == 1 ? "" : "s", cluster_table(hosts));
      fmt::print("# the cluster as a deployment file's hosts (add model, layout and config; `plan --file` reads it)\n");
    }
    fmt::print("{}", yaml);
    if (check) {
      fmt::print("\n");
      for (const std::string& line : check->differences)
        fmt::print("differs from {}: {}\n", options.bridge->file.source, line);
      for (const std::string& line : check->not_checked) fmt::print("{}\n", line);
      if (check->differences.empty())
        fmt::print("matches {}: every fact it states{}\n", options.bridge->file.source,
                   check->not_checked.empty() ? "" : " that could be checked here");
    }
  } else {
    fmt::print("rank {}: facts sent to rank 0, which prints the cluster\n", env.rank);
  }
  if (!verdict.is_ok()) fmt::print(stderr, "engramlab doctor: rank {}: {}\n", env.rank, verdict.message());
  std::fflush(stdout);
  return verdict.is_ok() ? 0 : 1;
}

}  // namespace engram::app
