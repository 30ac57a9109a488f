#include "core/plan/deployment_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>

#include "core/base/checked_math.h"
#include "core/base/size_text.h"
#include "core/base/text_list.h"
#include "core/deployment/deployment_validate.h"
#include "core/deployment/node_local_group.h"
#include "core/deployment/shard_groups.h"
#include "core/engines/engine_profile.h"
#include "core/model/hash_overrides.h"
#include "core/model/table_spec.h"
#include "core/exchange/handle_type_plan.h"
#include "core/plan/memory_fit.h"
#include "core/plan/plan_explain.h"

namespace engram {
namespace {

ModelSummary summarize(const ModelSpec& spec) {
  ModelSummary s;
  s.name = spec.name;
  for (const TableSpec& t : spec.tables) {
    s.layer_ids.push_back(t.layer_id);
    s.heads_per_table.push_back(t.head_count());
    s.rows_per_table.push_back(t.row_count());
    s.table_bytes.push_back(t.table_bytes());
    s.row_bytes = t.row_bytes();
  }
  s.table_bytes_total = spec.table_bytes_total();
  s.compressed_vocab_size = spec.compressed_vocab_size;
  s.pad_id = spec.pad_id;
  s.dead_tokens = std::string(dead_token_rule_name(spec.dead_token_rule));
  s.hash_seed = spec.seed;
  s.source_path = spec.source_path;
  s.kv_bytes_per_token = spec.serving.kv_bytes_per_token;
  s.row_format = spec.tables.empty() || spec.tables[0].row_format == RowFormat::kFp8E4M3Ue8m0 ? "fp8_e4m3_ue8m0" : "bf16";
  return s;
}

// Views of `host`'s strings: the deployment outlives the decision.
HandleFacts handle_facts_of(const HostSpec& host) {
  // Predicted, not probed: FABRIC works where the attribute is stated and
  // an IMEX channel exists (choose_handle_type asks for both).
  return {host.name, host.boot_id, host.nvlink_domain, host.imex_channel, host.fabric_attribute,
          host.posix_fd_attribute, /*predicted=*/true};
}

// The group a rank's placement cuts its tables over, and its size.
int group_of(const RankPlan& rp) {
  return placement_ops(rp.placement).group == PlacementGroup::kShardGroup ? rp.shard_group : rp.node_local_group;
}
int group_size_of(const RankPlan& rp) {
  return placement_ops(rp.placement).group == PlacementGroup::kShardGroup ? rp.shard_group_size
                                                                          : rp.node_local_group_size;
}

// What host_shared's capability check reads of each host that holds ranks:
// its /dev/shm, its environment and the smallest node-local group among its
// ranks. In host order.
std::vector<HostShmFacts> host_shm_facts(const Deployment& d, const NodeLocalGroups& local) {
  std::vector<int> min_group_on_host(d.hosts.size(), -1);
  for (size_t r = 0; r < d.rank_hosts.size(); ++r) {
    int& m = min_group_on_host[static_cast<size_t>(d.rank_hosts[r])];
    m = m < 0 ? local.size_by_rank[r] : std::min(m, local.size_by_rank[r]);
  }
  std::vector<HostShmFacts> facts;
  for (size_t h = 0; h < d.hosts.size(); ++h) {
    if (min_group_on_host[h] < 0) continue;
    const HostSpec& host = d.hosts[h];
    facts.push_back({host.name, host.shm_mounted, host.tmpfs_bytes_total, min_group_on_host[h], host.environment});
  }
  return facts;
}

// An explicit dp_shared_memory: true (and no peer_shards) is validated
// strictly, every unmet requirement named in one error.
Status validate_strict_when_asked(const Deployment& d, const DpSharedMemoryResolution& shared,
                                  std::span<const HostShmFacts> hosts, uint64_t table_total) {
  if (!(shared.is_explicit && shared.enabled && !d.config.peer_shards)) return Status::ok();
  return validate_dp_shared_memory_strict(d.config, d.layout, hosts, table_total);
}

using HandleTypeByGroup = std::map<int, HandleType>;

// What the rules decided for every rank, and what to warn about once.
struct Decisions {
  std::vector<PlacementDecision> by_rank;
  bool peer_precedence = false;
  bool fell_back = false;  // some rank fell back to host_head_sharded: the fallback warnings are due
};

// The placement rules per rank (core/plan/placement_rules.h); fills each
// rank's plan but its shard group and memory.
Result<Decisions> decide_ranks(const Deployment& d, const EngineProfile& engine, const DpSharedMemoryResolution& shared,
                               const NodeLocalGroups& local, uint64_t table_total, std::vector<RankPlan>& ranks) {
  const int world = d.layout.world_size();
  Decisions out;
  out.by_rank.resize(static_cast<size_t>(world));
  ranks.resize(static_cast<size_t>(world));
  std::vector<int> first_rank_on_host(d.hosts.size(), -1);
  for (int r = 0; r < world; ++r) {
    const size_t i = static_cast<size_t>(r);
    const int h = d.rank_hosts[i];
    const HostSpec& host = d.hosts[static_cast<size_t>(h)];
    const HostShmFacts facts{host.name, host.shm_mounted, host.tmpfs_bytes_total, local.size_by_rank[i],
                             host.environment};
    PlacementDecision& dec = out.by_rank[i];
    dec = decide_rank_placement(d.config, shared, facts, table_total);
    // The engine builds its own placement for what the rules decided.
    ENGRAM_ASSIGN_OR_RETURN(const Placement built, engine.placement_of(engine, d, dec.placement));
    if (built != dec.placement) {
      dec.reason += fmt::format("; engine {} builds {} here", engine.name, placement_name(built));
      dec.placement = built;
    }
    out.peer_precedence |= dec.peer_precedence;
    out.fell_back |= !dec.fallback_causes.empty();
    RankPlan& rp = ranks[i];
    rp.rank = r;
    rp.tp_rank = r % d.layout.tp;
    rp.dp_rank = r / d.layout.tp;
    rp.host = h;
    rp.placement = dec.placement;
    rp.node_local_group = local.group_by_rank[i];
    rp.node_local_group_size = local.size_by_rank[i];
    rp.node_local_index = local.index_by_rank[i];
    // Every input of the rules is the same on every rank of a host (the
    // node-local group size too), so a host's ranks decide alike: the
    // runtime's host-wide steps (a /dev/shm table) rely on it.
    int& first = first_rank_on_host[static_cast<size_t>(h)];
    if (first < 0) first = r;
    ENGRAM_CHECK_MSG(ranks[static_cast<size_t>(first)].placement == rp.placement,
                     "two ranks of one host decided different placements");
  }
  return out;
}

// The shard groups of placements cut over them (every rank decides alike
// there: the rule depends only on the config), and, where peers map each
// other's shards, each group's handle type (predicted as the exchange
// decides it). Errors: failed_precondition when a group has no handle type.
Result<HandleTypeByGroup> assign_shard_groups(const Deployment& d, const NodeLocalGroups& local,
                                              std::vector<RankPlan>& ranks) {
  HandleTypeByGroup handle_by_group;
  const PlacementOps& ops = placement_ops(ranks.front().placement);
  if (ops.group != PlacementGroup::kShardGroup) return handle_by_group;
  const ShardGroups shards = compute_shard_groups(d.config.shard_group, d.rank_hosts, d.hosts, d.layout.tp, &local);
  std::vector<std::vector<HandleFacts>> facts_by_group(static_cast<size_t>(shards.group_count));
  for (size_t r = 0; r < ranks.size(); ++r) {
    RankPlan& rp = ranks[r];
    ENGRAM_CHECK(rp.placement == ops.id);
    rp.shard_group = shards.group_by_rank[r];
    rp.shard_group_size = shards.size_by_rank[r];
    rp.shard_index = shards.index_by_rank[r];
    if (ops.shares_device_memory)
      facts_by_group[static_cast<size_t>(rp.shard_group)].push_back(
          handle_facts_of(d.hosts[static_cast<size_t>(rp.host)]));
  }
  for (int g = 0; g < shards.group_count; ++g) {
    if (facts_by_group[static_cast<size_t>(g)].empty()) continue;
    auto type = choose_handle_type(facts_by_group[static_cast<size_t>(g)]);
    if (!type.is_ok())
      return failed_precondition(fmt::format("{} shard group {} (shard_group: {}): {}", ops.name, g,
                                             shard_group_name(d.config.shard_group), type.status().message()));
    handle_by_group[g] = type.value();
  }
  return handle_by_group;
}

// Ranks sharing a GPU (hosts[].ranks_per_gpu above 1) where the placement
// needs a GPU per rank: failed_precondition naming the host, the GPU, its
// ranks and the fix (the first such GPU; the count of the others).
Status check_gpu_sharing(const Deployment& d, const std::vector<RankPlan>& ranks) {
  std::vector<int> slot_of_host(d.hosts.size(), 0);
  std::map<std::pair<int, int>, std::vector<int>> refused;  // (host, GPU) -> ranks
  for (const RankPlan& rp : ranks) {
    const HostSpec& host = d.hosts[static_cast<size_t>(rp.host)];
    const int gpu = slot_of_host[static_cast<size_t>(rp.host)]++ / host.ranks_per_gpu;
    if (host.ranks_per_gpu > 1 && placement_ops(rp.placement).needs_a_gpu_per_rank) refused[{rp.host, gpu}].push_back(rp.rank);
  }
  for (auto it = refused.begin(); it != refused.end();) it = it->second.size() < 2 ? refused.erase(it) : std::next(it);
  if (refused.empty()) return Status::ok();
  const auto& [where, on_gpu] = *refused.begin();
  const HostSpec& host = d.hosts[static_cast<size_t>(where.first)];
  const Placement placement = ranks[static_cast<size_t>(on_gpu.front())].placement;
  return failed_precondition(fmt::format(
      "ranks {} share GPU {} of host '{}' (hosts[{}].ranks_per_gpu: {}){}, and {} runs NCCL, which puts one rank of a "
      "communicator on a GPU; give each rank a GPU of its own (ranks_per_gpu: 1), or a placement that runs on a "
      "shared GPU: config.peer_shards: true (device_peer) or config.cpu_offload: true (a host placement)",
      compress_ranges(on_gpu), where.second, host.name, where.first, host.ranks_per_gpu,
      refused.size() > 1 ? fmt::format(" (and the ranks of {} more shared GPUs)", refused.size() - 1) : std::string(),
      placement_name(placement)));
}

// Ranks that share a memfd copy (PlacementOps::needs_one_pid_namespace) on a
// host entry whose ranks each sit in a PID namespace of their own:
// failed_precondition naming the host, its ranks and the fix (the first such host).
Status check_pid_namespaces(const Deployment& d, const std::vector<RankPlan>& ranks) {
  std::map<int, std::vector<int>> by_host;
  for (const RankPlan& rp : ranks)
    if (placement_ops(rp.placement).needs_one_pid_namespace &&
        d.hosts[static_cast<size_t>(rp.host)].pid_namespaces == PidNamespaces::kPerRank)
      by_host[rp.host].push_back(rp.rank);
  for (const auto& [h, on_host] : by_host) {
    if (on_host.size() < 2) continue;
    const HostSpec& host = d.hosts[static_cast<size_t>(h)];
    return failed_precondition(fmt::format(
        "{}: ranks {} on host '{}' each sit in a PID namespace of their own (hosts[{}].pid_namespace: per_rank), so "
        "they cannot open their writer's memfd through /proc/<pid>/fd/<n>; share the PID namespace (docker run "
        "--pid=host, or one Kubernetes pod with shareProcessNamespace: true; then pid_namespace: shared), or set "
        "config.placement: sglang_private",
        placement_name(ranks[static_cast<size_t>(on_host.front())].placement), compress_ranges(on_host), host.name, h));
  }
  return Status::ok();
}

// Each rank's memory from its placement's cost; a warning per host whose
// GPUs the tables overfill.
// A host's sums add what each of its ranks holds, and a rank may hold a
// whole copy (host_private, or HBM rows shared by its GPU's ranks): where
// the ranks of one host times the model's tables pass 4 EiB (2^62: room left
// for buffers, staging and a reserve of up to 1 EiB, and for their signed
// difference from a GPU's memory), the plan refuses it naming the host,
// rather than stop on a sum that would wrap. No real model comes near: 188.8
// GiB of tables would need 24 million ranks on a host.
Status check_host_sums_fit(const ModelSpec& spec, const Deployment& d, const PlanResult& plan) {
  constexpr uint64_t kHostSumBytesMax = uint64_t{1} << 62;
  std::vector<uint64_t> ranks_on(d.hosts.size(), 0);
  for (const RankPlan& rp : plan.ranks) ++ranks_on[static_cast<size_t>(rp.host)];
  const uint64_t tables = spec.table_bytes_total();
  for (size_t h = 0; h < d.hosts.size(); ++h) {
    const std::optional<uint64_t> worst = product_if_fits(tables, ranks_on[h]);
    if (worst && *worst <= kHostSumBytesMax) continue;
    return invalid_argument(fmt::format(
        "hosts[{}] '{}': {} ranks, each able to hold a copy of model {}'s {} of tables, would make the host's memory "
        "sums pass 4 EiB; put fewer ranks on a host (its gpus, ranks_per_gpu) or give a model with smaller tables",
        h, d.hosts[h].name, ranks_on[h], spec.name, format_size_short(tables)));
  }
  return Status::ok();
}

Status plan_rank_memory(const ModelSpec& spec, const Deployment& d, PlanResult& plan,
                        const std::function<void(const Warning&)>& warn) {
  ENGRAM_RETURN_IF_ERROR(check_host_sums_fit(spec, d, plan));
  std::vector<RankMemoryInput> memory_in(plan.ranks.size());
  std::vector<int> slot_of_host(d.hosts.size(), 0);
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan& rp = plan.ranks[r];
    memory_in[r] = {rp.host,         rp.placement,           std::max(rp.shard_group_size, 1), rp.node_local_group,
                    rp.node_local_group_size, rp.node_local_index, d.layout.tp,                  rp.tp_rank,
                    std::max(rp.shard_index, 0)};
    // Its GPU's socket: the host's fact (gpu_numa_node), which the emulator's hosts read too.
    const HostSpec& host = d.hosts[static_cast<size_t>(rp.host)];
    const int gpu = slot_of_host[static_cast<size_t>(rp.host)]++ / std::max(host.ranks_per_gpu, 1);
    memory_in[r].numa_node = gpu_numa_node(host, gpu);
  }
  MemoryPlan memory = plan_memory(spec, d.hosts, memory_in, d.config.tokens_per_rank_max, d.engine);
  for (size_t r = 0; r < plan.ranks.size(); ++r) plan.ranks[r].memory = memory.ranks[r];
  plan.hosts = std::move(memory.hosts);
  if (const std::optional<Warning> kv = kv_cache_exhausted_warning(plan.hosts, d.engine)) warn(*kv);
  if (const std::optional<Warning> kv = kv_capacity_warning(plan.ranks, spec, d.engine)) warn(*kv);
  return Status::ok();
}

// Ranks that decided alike, with the reason once: "ranks 0-3: host_shared (...)".
void summarize_groups(PlanResult& plan, const Decisions& decisions, const HandleTypeByGroup& handle_by_group) {
  using Key = std::tuple<Placement, int, int, std::string>;
  std::map<Key, size_t> index_of;
  std::vector<std::map<int, bool>> seen_groups;
  for (const RankPlan& rp : plan.ranks) {
    const int group = group_of(rp);
    const int handle =
        placement_ops(rp.placement).shares_device_memory ? static_cast<int>(handle_by_group.at(group)) : -1;
    const std::string& reason = decisions.by_rank[static_cast<size_t>(rp.rank)].reason;
    Key key{rp.placement, group_size_of(rp), handle, reason};
    auto [it, inserted] = index_of.emplace(key, plan.groups.size());
    if (inserted) {
      PlacementGroupSummary s;
      s.placement = rp.placement;
      s.group_size = group_size_of(rp);
      if (handle >= 0) s.handle_type = static_cast<HandleType>(handle);
      s.reason = reason;
      plan.groups.push_back(std::move(s));
      seen_groups.emplace_back();
    }
    PlacementGroupSummary& s = plan.groups[it->second];
    s.ranks.push_back(rp.rank);
    if (!seen_groups[it->second][group]) {
      seen_groups[it->second][group] = true;
      ++s.group_count;
    }
  }
  for (PlacementGroupSummary& s : plan.groups) {
    s.ranks_text = compress_ranges(s.ranks);
    std::string line = fmt::format("ranks {}: {} ({})", s.ranks_text, placement_name(s.placement), s.reason);
    if (s.handle_type) {
      line += fmt::format("; handle type {}: {}", handle_type_name(*s.handle_type),
                          *s.handle_type == HandleType::kFabric
                              ? "every host of the group has an IMEX channel and fabric support in one NVLink domain"
                              : "all ranks of the group are on one host");
    }
    plan.reasons.push_back(std::move(line));
  }
}

}  // namespace

Result<PlanResult> plan_deployment(const Deployment& input, WarningSink& sink) {
  ENGRAM_ASSIGN_OR_RETURN(Deployment d, validate_and_complete(input));
  ENGRAM_ASSIGN_OR_RETURN(ModelSpec spec, resolve_model(d.model, d.model_hash, "model"));
  const uint64_t table_total = spec.table_bytes_total();
  // The engine's defaults and refusals before any rule reads the config.
  const EngineProfile& engine = engine_profile_of(d.engine);
  apply_engine_defaults(engine, d);
  ENGRAM_RETURN_IF_ERROR(validate_for_engine(engine, d, spec));

  PlanResult plan;
  plan.model = summarize(spec);
  plan.dp_shared_memory = resolve_dp_shared_memory(d.config, d.layout);
  if (!engine.settings.dp_shared_memory)  // its host layout decides instead (validate refused it written)
    plan.dp_shared_memory = {false, false, fmt::format("engine {} has no dp_shared_memory: its host layout decides "
                                                       "which host table a rank gets", engine.name)};
  plan.reasons.push_back(plan.dp_shared_memory.reason);

  // 1. The rules, per rank, from per-host facts.
  const NodeLocalGroups local = engine.node_local_groups(engine, d);
  const std::vector<HostShmFacts> shm_facts = host_shm_facts(d, local);
  ENGRAM_RETURN_IF_ERROR(validate_strict_when_asked(d, plan.dp_shared_memory, shm_facts, table_total));
  ENGRAM_ASSIGN_OR_RETURN(const Decisions decisions,
                          decide_ranks(d, engine, plan.dp_shared_memory, local, table_total, plan.ranks));
  // 2. Shard groups and handle types where the placement needs them.
  ENGRAM_ASSIGN_OR_RETURN(const HandleTypeByGroup handle_by_group, assign_shard_groups(d, local, plan.ranks));
  ENGRAM_RETURN_IF_ERROR(check_gpu_sharing(d, plan.ranks));
  ENGRAM_RETURN_IF_ERROR(check_pid_namespaces(d, plan.ranks));
  // The engine's own checks where it creates the tables (vLLM: /dev/shm free space).
  if (engine.check_at_creation != nullptr) {
    std::vector<Placement> placement_by_host(d.hosts.size(), Placement::kDeviceCollective);
    for (const RankPlan& rp : plan.ranks) placement_by_host[static_cast<size_t>(rp.host)] = rp.placement;
    ENGRAM_RETURN_IF_ERROR(engine.check_at_creation(d, spec, placement_by_host));
  }

  // 3. Warnings: once per cause, into the sink (process-wide dedup) and the result.
  auto warn = [&](const Warning& w) {
    sink.emit(w);
    append_unique(plan.warnings, w);
  };
  if (decisions.peer_precedence) warn(peer_precedence_warning());
  // One warning per cause, from host_shared's own check of every host.
  if (decisions.fell_back)
    for (const Warning& w : fallback_warnings(host_shared_fitness(shm_facts, table_total), table_total,
                                              engine.fallback_wording))
      warn(w);

  // 4. Memory, then 5. the summaries people read.
  ENGRAM_RETURN_IF_ERROR(plan_rank_memory(spec, d, plan, warn));
  summarize_groups(plan, decisions, handle_by_group);
  // Never silent: a GPU that ranks share is said, with each rank's share.
  for (const HostMemory& hm : plan.hosts) {
    const HostSpec& host = d.hosts[static_cast<size_t>(hm.host)];
    if (host.ranks_per_gpu < 2) continue;
    plan.reasons.push_back(fmt::format("host '{}': {} ranks share each of its {} GPU{} (hosts[{}].ranks_per_gpu: {}); "
                                       "each rank plans with {} of the GPU's {}",
                                       host.name, host.ranks_per_gpu, host.gpu_count, host.gpu_count == 1 ? "" : "s",
                                       hm.host, host.ranks_per_gpu, format_size_short(gpu_memory_share_bytes(host)),
                                       format_size_short(host.gpu_memory_bytes)));
  }
  plan.memory_limits = memory_limit_scopes(d);
  plan.decided_by = explain_decisions(engine, d, plan, spec);
  plan.engine_extra = engine_extra_memory(engine);
  plan.deployment = std::move(d);
  return plan;
}

}  // namespace engram
