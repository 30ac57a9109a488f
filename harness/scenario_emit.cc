#include "harness/scenario_emit.h"

#include "core/engines/engine_profile.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>

#include "core/base/check.h"
#include "core/base/rerun_command.h"
#include "core/base/units.h"
#include "core/deployment/shard_groups.h"
#include "core/model/gpu_models.h"
#include "core/model/table_spec.h"
#include "harness/scenario_check.h"

namespace engram::harness {
namespace {

// Sizes as the deployment parser reads them, exactly (no rounding).
std::string exact_size(uint64_t bytes) {
  if (bytes != 0 && bytes % kGiB == 0) return fmt::format("{}GiB", bytes / kGiB);
  if (bytes != 0 && bytes % kMiB == 0) return fmt::format("{}MiB", bytes / kMiB);
  return fmt::format("{}B", bytes);
}

YAML::Node flow(YAML::Node node) {
  node.SetStyle(YAML::EmitterStyle::Flow);
  return node;
}

// The deployment fields of a drawn case (the swarm draws only these).
void write_drawn_deployment(const Deployment& d, YAML::Node& root) {
  root["model"] = d.model;
  for (const HostSpec& h : d.hosts) {
    YAML::Node host;
    host["name"] = h.name;
    host["gpus"] = h.gpu_count;
    host["gpu_model"] = h.gpu_model;
    host["shm_size"] = h.shm_mounted ? exact_size(h.tmpfs_bytes_total) : std::string("none");
    if (!h.nvlink_domain.empty()) host["nvlink_domain"] = h.nvlink_domain;
    host["imex_channel"] = h.imex_channel;
    host["fabric_attribute"] = h.fabric_attribute;
    if (!h.posix_fd_attribute) host["posix_fd_attribute"] = false;
    if (h.visible_gpus_per_rank != 0) host["visible_gpus_per_rank"] = h.visible_gpus_per_rank;
    if (h.ranks_per_gpu != 1) host["ranks_per_gpu"] = h.ranks_per_gpu;
    root["hosts"].push_back(flow(host));
  }
  if (!d.rank_hosts.empty()) {
    YAML::Node ranks;
    for (int h : d.rank_hosts) ranks.push_back(h);
    root["rank_hosts"] = flow(ranks);
  }
  YAML::Node layout;
  layout["tp"] = d.layout.tp;
  layout["dp"] = d.layout.dp;
  if (d.layout.elastic_ep) layout["elastic_ep"] = true;
  if (d.layout.prefill_cp != 1) layout["prefill_cp"] = d.layout.prefill_cp;
  if (d.layout.extra_ranks != 0) layout["extra_ranks"] = d.layout.extra_ranks;
  root["layout"] = flow(layout);
  YAML::Node config;
  config["cpu_offload"] = d.config.cpu_offload;
  config["peer_shards"] = d.config.peer_shards;
  if (d.config.dp_shared_memory) config["dp_shared_memory"] = *d.config.dp_shared_memory;
  config["shard_group"] = shard_group_name(d.config.shard_group);
  if (d.config.sequence_parallel) config["sequence_parallel"] = true;
  if (!d.config.placement.empty()) config["placement"] = d.config.placement;
  if (d.config.embedding_across_dp) config["embedding_across_dp"] = true;
  if (d.config.thp_packing) config["thp_packing"] = true;
  if (!d.config.host_layout.empty()) config["host_layout"] = d.config.host_layout;
  root["config"] = flow(config);
  // Another engine's rules planned it: the emitted file says whose.
  if (d.engine.profile != EngineId::kEngramlab) {
    YAML::Node engine;
    engine["name"] = engine_name(d.engine.profile);
    root["engine"] = flow(engine);
  }
}

// What a drawn deployment leaves out and a written one may hold: each
// host's environment and limits, the engine's memory settings.
void write_deployment_extras(const Deployment& d, YAML::Node& root) {
  for (size_t i = 0; i < d.hosts.size(); ++i) {
    const HostSpec& h = d.hosts[i];
    YAML::Node host = root["hosts"][i];
    if (h.environment != RuntimeEnvironment::kUnknown) host["environment"] = runtime_environment_name(h.environment);
    if (h.host_memory_bytes != 0) host["host_memory"] = exact_size(h.host_memory_bytes);
    if (h.gpu_memory_bytes != 0) host["gpu_memory"] = exact_size(h.gpu_memory_bytes);
    // Exact bytes: a Kubernetes host reads a letter alone as powers of 1000.
    if (h.memory_limit_bytes) host["memory_limit"] = exact_size(*h.memory_limit_bytes);
    if (h.memory_limit_bytes_per_rank) host["memory_limit_per_rank"] = exact_size(*h.memory_limit_bytes_per_rank);
    if (h.tmpfs_bytes_enforced) host["shm_size_limit"] = exact_size(*h.tmpfs_bytes_enforced);
  }
  YAML::Node engine = root["engine"] ? root["engine"] : YAML::Node();
  engine["name"] = engine_name(d.engine.profile);
  if (d.engine.fraction_given) engine["gpu_memory_fraction"] = d.engine.gpu_memory_fraction;
  if (d.engine.context_length_tokens) engine["context_length"] = *d.engine.context_length_tokens;
  if (d.engine.gpu_reserved_bytes && !d.engine.reserved_from_model)
    engine["gpu_reserved"] = exact_size(*d.engine.gpu_reserved_bytes);
  if (d.engine.negative_kv_allowed) engine["allow_negative_kv"] = true;
  root["engine"] = flow(engine);
  if (d.layout.ep != 1) root["layout"]["ep"] = d.layout.ep;
  if (!d.config.cpu_offload_given) root["config"].remove("cpu_offload");  // the engine's default, as written
}

void write_faults(const sim::FaultPlan& plan, const sim::FaultReport& report, YAML::Node& root) {
  YAML::Node faults;
  for (const sim::PlannedFault& f : plan.planned) {
    const bool never = std::any_of(report.never_fired.begin(), report.never_fired.end(), [&](const sim::PlannedFault& n) {
      return n.site == f.site && n.rank == f.rank && n.occurrence == f.occurrence && n.at == f.at;
    });
    if (never) continue;
    YAML::Node entry;
    entry["site"] = sim::fault_site_name(f.site);
    entry["rank"] = f.rank;
    if (f.occurrence != 1) entry["occurrence"] = f.occurrence;
    if (!f.at.empty()) entry["at"] = f.at;
    if (f.delay_us != 0) entry["delay_ms"] = f.delay_us / 1000;
    if (f.slower.link != 1.0) entry["link_factor"] = f.slower.link;
    if (f.slower.gpu != 1.0) entry["gpu_factor"] = f.slower.gpu;
    faults["planned"].push_back(flow(entry));
  }
  bool any_rate = false;
  for (int s = 0; s < sim::kFaultSiteCount; ++s)
    if (const double p = plan.rate[static_cast<size_t>(s)]; p > 0) {
      faults["rates"][sim::fault_site_name(static_cast<sim::FaultSite>(s))] = p;
      any_rate = true;
    }
  if (any_rate) {
    faults["rates"].SetStyle(YAML::EmitterStyle::Flow);
    faults["slow_delay_ms"] = plan.slow_delay_us / 1000;
  }
  if (faults.size() > 0) root["faults"] = faults;
}

// A model or GPU file named relative to the source file (`model:
// ../models/x.yaml`, `lookup: {model: x.yaml}`, `hosts: [{gpu_model:
// gpus/h.yaml}]`) would not resolve from where the emitted scenario goes:
// each is written as the path the source's parse resolved it to.
void absolute_model_node(YAML::Node node, const std::string& resolved) {
  if (!node) return;
  if (node.IsScalar() && names_a_model_file(node.Scalar())) node = resolved;
  else if (node.IsMap() && node["name"] && node["name"].IsScalar() && names_a_model_file(node["name"].Scalar()))
    node["name"] = resolved;
}

// `source`: the file the words come from; a relative GPU file resolves from
// its directory, as the deployment parser resolves it.
void keep_model_files_reachable(const std::string& model, const ScenarioLookup* lookup, const std::string& source,
                                YAML::Node& root) {
  if (root["model"]) absolute_model_node(root["model"], model);
  if (lookup != nullptr && root["lookup"].IsMap() && root["lookup"]["model"])
    absolute_model_node(root["lookup"]["model"], lookup->model);
  YAML::Node hosts = root["hosts"];
  if (!hosts.IsSequence()) return;
  const std::filesystem::path from = std::filesystem::path(absolute_file_path(source)).parent_path();
  for (size_t i = 0; i < hosts.size(); ++i) {
    YAML::Node gpu = hosts[i].IsMap() ? hosts[i]["gpu_model"] : YAML::Node();
    if (!gpu || !gpu.IsScalar() || !names_a_gpu_file(gpu.Scalar())) continue;
    const std::filesystem::path file(gpu.Scalar());
    if (file.is_relative()) hosts[i]["gpu_model"] = (from / file).lexically_normal().string();
  }
}

// "0-3" or "5".
std::string rank_range(int first, int last) {
  return first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
}

void write_expect(bool lookup_run, const EmulatedOutcome& out, YAML::Node& root) {
  YAML::Node expect;
  if (out.error) {
    YAML::Node error;
    error["kind"] = error_code_name(out.error->code());
    if (out.error->context().rank >= 0) error["rank"] = out.error->context().rank;
    if (!out.error->context().step.empty()) error["step"] = out.error->context().step;
    expect["error"] = flow(error);
  } else {
    // Each run of ranks that took one placement.
    const size_t n = out.ranks.size();
    for (size_t first = 0; first < n;) {
      const auto p = decided_placement(out.plan, out.ranks, first);
      size_t last = first;
      while (last + 1 < n && decided_placement(out.plan, out.ranks, last + 1) == p) ++last;
      if (p) {
        YAML::Node entry;
        entry["ranks"] = rank_range(static_cast<int>(first), static_cast<int>(last));
        entry["placement"] = placement_name(*p);
        expect["placement"].push_back(flow(entry));
      }
      first = last + 1;
    }
    if (lookup_run) expect["lookup_equal"] = true;
    uint64_t ids_checked = 0;
    for (const RankOutcome& r : out.ranks) ids_checked += r.ids_checked;
    if (lookup_run && ids_checked > 0) expect["ids_equal_whole"] = true;
  }
  std::optional<HandleType> handle;
  bool agreed = true;
  for (const RankOutcome& r : out.ranks)
    if (r.handle_type) {
      agreed = agreed && (!handle || *handle == *r.handle_type);
      handle = r.handle_type;
    }
  if (handle && agreed) expect["handle_type"] = handle_type_name(*handle);
  YAML::Node fired;
  for (int s = 0; s < sim::kFaultSiteCount; ++s)
    if (out.world.faults.fired(static_cast<sim::FaultSite>(s)) > 0) fired.push_back(sim::fault_site_name(static_cast<sim::FaultSite>(s)));
  if (fired.size() > 0) expect["faults_fired"] = flow(fired);
  if (expect.size() == 0) expect["no_leaks"] = true;
  root["expect"] = expect;
}

}  // namespace

std::string swarm_case_scenario_yaml(uint64_t seed, const SwarmCase& drawn, const SwarmTarget& target,
                                     const EmulatedOutcome& out) {
  YAML::Node root;
  root["name"] = fmt::format("fuzz_seed_{}", seed);
  root["description"] = fmt::format("emitted by fuzz --emit-scenario {}: {}", seed, drawn.description);
  const Deployment& d = drawn.job.deployment;
  YAML::Node file;
  if (!target.file.empty()) file = YAML::Load(target.file_text);  // parsed once already: valid
  if (file.IsMap()) {
    // The file's own words for its deployment (counts, names, sizes as written).
    for (const char* key : {"model", "hosts", "rank_hosts", "layout", "config"})
      if (file[key]) root[key] = file[key];
    keep_model_files_reachable(d.model, nullptr, target.file, root);
  } else {
    write_drawn_deployment(d, root);
  }
  if (d.timeouts.collective_ms != Timeouts{}.collective_ms || d.timeouts.join_ms != Timeouts{}.join_ms) {
    YAML::Node timeouts;
    timeouts["collective_ms"] = d.timeouts.collective_ms;
    timeouts["join_ms"] = d.timeouts.join_ms;
    root["timeouts"] = flow(timeouts);
  }
  root["seed"] = seed;
  write_faults(drawn.job.faults, out.world.faults, root);
  if (file.IsMap() && file["lookup"]) {
    root["lookup"] = file["lookup"];
    if (target.lookup) keep_model_files_reachable(d.model, &*target.lookup, target.file, root);
  } else {
    YAML::Node lookup;
    lookup["model"] = drawn.job.lookup.model;
    if (drawn.job.lookup.steps.drawn) lookup["steps"] = "drawn";
    else lookup["tokens"] = drawn.job.lookup.tokens;
    lookup["run"] = drawn.job.lookup.run;
    root["lookup"] = flow(lookup);
  }
  write_expect(drawn.job.lookup.run, out, root);
  YAML::Emitter emitter;
  emitter << root;
  return fmt::format("# drawn by: {}\n{}\n", rerun_command(swarm_rerun_args(seed, false, target)), emitter.c_str());
}

// Runs `emitted.yaml` alone: it must parse, pass and give `emitted.trace_hash`.
Result<EmittedScenario> checked(EmittedScenario emitted, const std::string& what) {
  auto scenario = parse_scenario_text(emitted.yaml, what);
  if (!scenario.is_ok())
    return Status(ErrorCode::kInternal,
                  fmt::format("the scenario emitted for {} does not parse (an engramlab bug; report it with this "
                              "line): {}\n{}",
                              what, scenario.status().message(), emitted.yaml));
  const ScenarioOutcome rerun = run_scenario(scenario.value());
  if (!rerun.passed || rerun.trace_hash != emitted.trace_hash) {
    std::string why;
    for (const std::string& f : rerun.failures) why += "\n  - " + f;
    return Status(ErrorCode::kInternal,
                  fmt::format("the scenario emitted for {} does not reproduce it (trace hash {:016x}, the scenario's "
                              "{:016x}){} (an engramlab bug; report it with this line)\n{}",
                              what, emitted.trace_hash, rerun.trace_hash, why, emitted.yaml));
  }
  return emitted;
}

Result<EmittedScenario> emit_swarm_case(uint64_t seed, const SwarmTarget& target) {
  SwarmCase drawn = draw_swarm_case(seed, target);
  drawn.job.reproduction = rerun_command(swarm_rerun_args(seed, false, target));
  const EmulatedOutcome out = run_emulated_job(drawn.job);
  return checked({.yaml = swarm_case_scenario_yaml(seed, drawn, target, out), .trace_hash = out.world.trace_hash},
                 fmt::format("seed {}", seed));
}

Result<EmittedScenario> emit_rated_scenario(const Scenario& scenario, uint64_t seed) {
  ENGRAM_CHECK(!scenario.fault_rates.empty());
  EmulatedOutcome out;
  run_scenario(scenario, seed, &out);
  // The text read when the scenario was loaded: the file is not read again.
  YAML::Node file = YAML::Load(scenario.source_text);
  YAML::Node root;
  root["name"] = fmt::format("{}_seed_{}", scenario.name, seed);
  root["description"] = fmt::format("emitted by scenario run --emit --seed {} from {}", seed, scenario.source);
  // The file's own words for everything the seed did not decide.
  for (auto it = file.begin(); it != file.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (key != "name" && key != "description" && key != "seed" && key != "expect") root[key] = it->second;
  }
  keep_model_files_reachable(scenario.deployment.model, &scenario.lookup, scenario.source, root);
  root["seed"] = seed;
  write_expect(scenario.lookup.run, out, root);
  YAML::Emitter emitter;
  emitter << root;
  const std::string line =
      rerun_command({"scenario", "run", "--emit", absolute_file_path(scenario.source), "--seed", std::to_string(seed)});
  return checked({.yaml = fmt::format("# drawn by: {}\n{}\n", line, emitter.c_str()),
                  .trace_hash = out.world.trace_hash},
                 fmt::format("{} at seed {}", scenario.source, seed));
}

std::string deployment_file_yaml(const Deployment& d) {
  YAML::Node root;
  write_drawn_deployment(d, root);
  write_deployment_extras(d, root);
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace engram::harness
