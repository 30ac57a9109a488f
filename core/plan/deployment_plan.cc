#include "core/plan/deployment_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <unordered_set>
#include <map>
#include <tuple>

#include "core/deployment/deployment_validate.h"
#include "core/plan/handle_type_plan.h"
#include "core/plan/memory_fit.h"
#include "core/deployment/node_local_group.h"
#include "core/deployment/shard_groups.h"
#include "core/model/table_spec.h"
#include "core/base/text_list.h"

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
  return s;
}

HandleFacts handle_facts_of(const HostSpec& host, int gpu_ordinal) {
  HandleFacts f;
  f.placement.host = HostIdentity{host.name, host.boot_id};
  f.placement.nvlink_domain = host.nvlink_domain;
  f.placement.imex_channel = host.imex_channel;
  f.placement.gpu_ordinal = gpu_ordinal;
  f.placement.visible_gpu_count = host.visible_gpus_per_rank == 0 ? host.gpu_count : host.visible_gpus_per_rank;
  // Predicted probe: the attribute alone lies without an IMEX channel.
  f.fabric_probe_ok = host.fabric_attribute && host.imex_channel;
  return f;
}

// The environment the named hosts share, or unknown when they differ (the
// warning then names every fix).
RuntimeEnvironment common_environment(const std::vector<HostSpec>& hosts, const std::vector<std::string>& names) {
  std::optional<RuntimeEnvironment> common;
  // A set: a fallback can name every host (linear, not hosts x names).
  const std::unordered_set<std::string_view> named(names.begin(), names.end());
  for (const HostSpec& h : hosts) {
    if (!named.contains(h.name)) continue;
    if (common && *common != h.environment) return RuntimeEnvironment::kUnknown;
    common = h.environment;
  }
  return common.value_or(RuntimeEnvironment::kUnknown);
}

}  // namespace

Result<PlanResult> plan_deployment(const Deployment& input, WarningSink& sink) {
  ENGRAM_ASSIGN_OR_RETURN(Deployment d, validate_and_complete(input));
  ENGRAM_ASSIGN_OR_RETURN(ModelSpec spec, model_preset(d.model));
  const uint64_t table_total = spec.table_bytes_total();
  const int world = d.layout.world_size();
  const int host_count = static_cast<int>(d.hosts.size());

  PlanResult plan;
  plan.model = summarize(spec);
  plan.dp_shared_memory = resolve_dp_shared_memory(d.config, d.layout);
  plan.reasons.push_back(plan.dp_shared_memory.reason);

  const NodeLocalGroups local = compute_node_local_groups(d.layout, d.rank_hosts, host_count);
  // Per-host facts, in host order, for strict validation and fallback warnings.
  std::vector<int> min_group_on_host(d.hosts.size(), -1);
  for (int r = 0; r < world; ++r) {
    int& m = min_group_on_host[static_cast<size_t>(d.rank_hosts[static_cast<size_t>(r)])];
    int s = local.size_by_rank[static_cast<size_t>(r)];
    m = m < 0 ? s : std::min(m, s);
  }
  const bool strict = plan.dp_shared_memory.is_explicit && plan.dp_shared_memory.enabled && !d.config.peer_shards;
  if (strict) {
    std::vector<HostShmFacts> facts;
    for (int h = 0; h < host_count; ++h) {
      if (min_group_on_host[static_cast<size_t>(h)] < 0) continue;  // holds no rank
      const HostSpec& host = d.hosts[static_cast<size_t>(h)];
      facts.push_back({host.name, host.shm_mounted, host.tmpfs_bytes_total, min_group_on_host[static_cast<size_t>(h)]});
    }
    ENGRAM_RETURN_IF_ERROR(validate_dp_shared_memory_strict(d.config, d.layout, facts, table_total));
  }

  // Per-rank decisions.
  plan.ranks.resize(static_cast<size_t>(world));
  std::vector<PlacementDecision> decisions(static_cast<size_t>(world));
  bool precedence = false;
  // cause -> (hosts it holds on, tmpfs total seen) for one warning per cause.
  std::map<FallbackCause, std::pair<std::vector<std::string>, uint64_t>> fallback_hosts;
  std::vector<std::map<FallbackCause, bool>> host_cause_noted(d.hosts.size());
  for (int r = 0; r < world; ++r) {
    const int h = d.rank_hosts[static_cast<size_t>(r)];
    const HostSpec& host = d.hosts[static_cast<size_t>(h)];
    RankHostFacts facts{local.size_by_rank[static_cast<size_t>(r)], host.shm_mounted, host.tmpfs_bytes_total};
    PlacementDecision& dec = decisions[static_cast<size_t>(r)];
    dec = decide_rank_placement(d.config, plan.dp_shared_memory, facts, table_total);
    precedence |= dec.peer_precedence;
    for (FallbackCause c : dec.fallback_causes) {
      if (host_cause_noted[static_cast<size_t>(h)][c]) continue;
      host_cause_noted[static_cast<size_t>(h)][c] = true;
      auto& entry = fallback_hosts[c];
      entry.first.push_back(host.name);
      entry.second = host.tmpfs_bytes_total;
    }
    RankPlan& rp = plan.ranks[static_cast<size_t>(r)];
    rp.rank = r;
    rp.tp_rank = r % d.layout.tp;
    rp.dp_rank = r / d.layout.tp;
    rp.host = h;
    rp.placement = dec.placement;
    rp.node_local_group = local.group_by_rank[static_cast<size_t>(r)];
    rp.node_local_group_size = local.size_by_rank[static_cast<size_t>(r)];
    rp.node_local_index = local.index_by_rank[static_cast<size_t>(r)];
  }

  // Device placements: shard groups (every rank decides alike on the device
  // side: the rule depends only on the config there).
  const bool device = is_device_placement(decisions[0].placement);
  std::map<int, HandleType> handle_by_group;
  if (device) {
    const ShardGroups shards = compute_shard_groups(d.config.shard_group, d.rank_hosts, d.hosts);
    std::vector<std::vector<HandleFacts>> facts_by_group(static_cast<size_t>(shards.group_count));
    std::vector<int> gpu_next(d.hosts.size(), 0);
    for (int r = 0; r < world; ++r) {
      RankPlan& rp = plan.ranks[static_cast<size_t>(r)];
      ENGRAM_CHECK(is_device_placement(rp.placement));
      rp.shard_group = shards.group_by_rank[static_cast<size_t>(r)];
      rp.shard_group_size = shards.size_by_rank[static_cast<size_t>(r)];
      rp.shard_index = shards.index_by_rank[static_cast<size_t>(r)];
      if (rp.placement == Placement::kDevicePeer) {
        facts_by_group[static_cast<size_t>(rp.shard_group)].push_back(
            handle_facts_of(d.hosts[static_cast<size_t>(rp.host)], gpu_next[static_cast<size_t>(rp.host)]++));
      }
    }
    if (decisions[0].placement == Placement::kDevicePeer) {
      for (int g = 0; g < shards.group_count; ++g) {
        auto type = choose_handle_type(facts_by_group[static_cast<size_t>(g)]);
        if (!type.is_ok()) {
          return failed_precondition(fmt::format(
              "device_peer shard group {} (shard_group: {}): {}", g, shard_group_name(d.config.shard_group),
              type.status().message()));
        }
        handle_by_group[g] = type.value();
      }
    }
  }

  // Warnings: once per cause, into the sink (process-wide dedup) and the result.
  auto warn = [&](const Warning& w) {
    sink.emit(w);
    append_unique(plan.warnings, w);
  };
  if (precedence) warn(peer_precedence_warning());
  for (const auto& [cause, where] : fallback_hosts)
    warn(fallback_warning(cause, where.first, table_total, where.second, common_environment(d.hosts, where.first)));

  // Memory.
  std::vector<RankMemoryInput> memory_in(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const RankPlan& rp = plan.ranks[static_cast<size_t>(r)];
    memory_in[static_cast<size_t>(r)] = {rp.host, rp.placement, std::max(rp.shard_group_size, 1),
                                         rp.node_local_group, rp.node_local_group_size, rp.node_local_index};
  }
  MemoryPlan memory = plan_memory(spec, d.hosts, memory_in, d.config.tokens_per_rank_max, d.engine);
  for (int r = 0; r < world; ++r) plan.ranks[static_cast<size_t>(r)].memory = memory.ranks[static_cast<size_t>(r)];
  plan.hosts = std::move(memory.hosts);
  for (const HostMemory& hm : plan.hosts) {
    if (hm.kv_cache_left_bytes_min < 0) warn(kv_cache_exhausted_warning(hm, d.engine));
  }

  // Summaries: ranks that decided alike, with the reason once.
  using Key = std::tuple<Placement, int, int, std::string>;
  std::map<Key, size_t> index_of;
  std::vector<std::map<int, bool>> seen_groups;
  for (int r = 0; r < world; ++r) {
    const RankPlan& rp = plan.ranks[static_cast<size_t>(r)];
    const bool dev = is_device_placement(rp.placement);
    const int size = dev ? rp.shard_group_size : rp.node_local_group_size;
    const int group = dev ? rp.shard_group : rp.node_local_group;
    int handle = -1;
    if (rp.placement == Placement::kDevicePeer) handle = static_cast<int>(handle_by_group.at(group));
    const std::string& reason = decisions[static_cast<size_t>(r)].reason;
    Key key{rp.placement, size, handle, reason};
    auto [it, inserted] = index_of.emplace(key, plan.groups.size());
    if (inserted) {
      PlacementGroupSummary s;
      s.placement = rp.placement;
      s.group_size = size;
      if (handle >= 0) s.handle_type = static_cast<HandleType>(handle);
      s.reason = reason;
      plan.groups.push_back(std::move(s));
      seen_groups.emplace_back();
    }
    PlacementGroupSummary& s = plan.groups[it->second];
    s.ranks.push_back(r);
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
  plan.deployment = std::move(d);
  return plan;
}

}  // namespace engram
