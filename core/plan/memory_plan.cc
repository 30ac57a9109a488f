#include "core/plan/memory_plan.h"

#include "core/base/checked_math.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "core/model/gpu_models.h"

namespace engram {
namespace {

// Costs depend only on the placement and its cost input: computed once each,
// so 1,000-rank plans stay linear.
class CostMemo {
 public:
  explicit CostMemo(const ModelSpec& spec) : spec_(spec) {}
  const PlacementCost& cost(Placement placement, const PlacementCostInput& input) {
    auto key = std::make_pair(placement, input);
    auto it = memo_.find(key);
    if (it == memo_.end()) it = memo_.emplace(key, placement_ops(placement).cost(spec_, input)).first;
    return it->second;
  }

 private:
  const ModelSpec& spec_;
  std::map<std::pair<Placement, PlacementCostInput>, PlacementCost> memo_;
};

// The whole table sets one host keeps, each counted once per its scope. A
// replica's TP ranks hold one set together (slices, or the Engram DP groups
// of its TP ranks), so a set is counted at its TP rank 0: where a replica
// straddles hosts, on the host of its TP rank 0.
struct CopyCounter {
  std::set<std::tuple<TableCopyScope, int, int, Placement>> seen;  // (scope, group or host, NUMA node, placement)
  // True the first time this rank's copy is seen.
  bool first(TableCopyScope scope, const RankMemoryInput& in, int rank) {
    switch (scope) {
      case TableCopyScope::kNone: return false;
      case TableCopyScope::kReplica: return in.tp_rank == 0 && seen.insert({scope, rank, 0, in.placement}).second;
      case TableCopyScope::kNodeLocalGroup:
        return in.tp_rank == 0 && seen.insert({scope, in.node_local_group, 0, in.placement}).second;
      case TableCopyScope::kHost: return seen.insert({scope, in.host, 0, in.placement}).second;
      case TableCopyScope::kNumaNode: return seen.insert({scope, in.host, in.numa_node, in.placement}).second;
      case TableCopyScope::kShardGroup: return in.shard_index == 0 && seen.insert({scope, rank, 0, in.placement}).second;
    }
    return false;
  }
};

}  // namespace

int64_t kv_cache_left_bytes(uint64_t gpu_memory_bytes, const EngineMemory& engine, uint64_t engram_hbm_bytes) {
  ENGRAM_CHECK(engine.gpu_memory_fraction > 0.0 && engine.gpu_memory_fraction <= 1.0);
  const auto budget = static_cast<uint64_t>(static_cast<double>(gpu_memory_bytes) * engine.gpu_memory_fraction);
  return checked_signed_difference(budget, checked_add(engram_hbm_bytes, engine.gpu_reserved_bytes.value_or(0)));
}

std::vector<MemoryLimitScope> memory_limit_scopes(const Deployment& d) {
  std::vector<MemoryLimitScope> scopes;
  std::vector<MemoryLimitScope> containers(d.hosts.size());
  for (size_t r = 0; r < d.rank_hosts.size(); ++r) {
    const int host = d.rank_hosts[r];
    const HostSpec& h = d.hosts[static_cast<size_t>(host)];
    if (h.memory_limit_bytes_per_rank) scopes.push_back({host, {static_cast<int>(r)}, *h.memory_limit_bytes_per_rank});
    if (h.memory_limit_bytes) {
      MemoryLimitScope& c = containers[static_cast<size_t>(host)];
      c.host = host;
      c.limit_bytes = *h.memory_limit_bytes;
      c.ranks.push_back(static_cast<int>(r));
    }
  }
  for (MemoryLimitScope& c : containers)
    if (!c.ranks.empty()) scopes.push_back(std::move(c));
  return scopes;
}

MemoryPlan plan_memory(const ModelSpec& spec, std::span<const HostSpec> hosts,
                       std::span<const RankMemoryInput> ranks, int tokens_per_rank_max, const EngineMemory& engine) {
  CostMemo memo(spec);
  CopyCounter copies;
  MemoryPlan plan;
  plan.ranks.resize(ranks.size());
  std::vector<HostMemory> host_rows(hosts.size());
  std::vector<bool> host_seen(hosts.size(), false);

  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankMemoryInput& in = ranks[r];
    ENGRAM_CHECK(in.host >= 0 && static_cast<size_t>(in.host) < hosts.size());
    const HostSpec& host = hosts[static_cast<size_t>(in.host)];
    ENGRAM_CHECK(host.gpu_memory_bytes > 0);
    ENGRAM_CHECK(in.tp_size >= 1 && in.tp_rank >= 0 && in.tp_rank < in.tp_size);
    const PlacementCostInput cost_input{.shard_group_size = in.shard_group_size,
                                        .shard_index = in.shard_index,
                                        .node_local_group_size = in.node_local_group_size,
                                        .node_local_index = in.node_local_index,
                                        .tokens_per_rank_max = tokens_per_rank_max,
                                        .vmm_granularity_bytes = kVmmGranularityBytes,
                                        .tp_size = in.tp_size,
                                        .tp_rank = in.tp_rank};
    const PlacementCost& cost = memo.cost(in.placement, cost_input);

    RankMemory& m = plan.ranks[r];
    m.gpu_memory_bytes = gpu_memory_share_bytes(host);  // ranks sharing a GPU split it
    m.hbm_table_bytes = cost.hbm_table_bytes;
    m.hbm_buffer_bytes = cost.hbm_buffer_bytes;
    m.host_private_bytes = cost.host_private_bytes;
    m.host_shared_mapped_bytes = cost.host_shared_mapped_bytes;
    m.host_pinned_bytes = cost.host_pinned_bytes;
    const uint64_t hbm = checked_add(m.hbm_table_bytes, m.hbm_buffer_bytes);
    m.kv_budget_bytes = static_cast<uint64_t>(static_cast<double>(m.gpu_memory_bytes) * engine.gpu_memory_fraction);
    m.gpu_reserved_bytes = engine.gpu_reserved_bytes.value_or(0);
    m.kv_cache_left_bytes = kv_cache_left_bytes(m.gpu_memory_bytes, engine, hbm);
    if (spec.serving.kv_bytes_per_token > 0) {
      m.kv_cache_left_tokens =
          std::max<int64_t>(0, m.kv_cache_left_bytes) / static_cast<int64_t>(spec.serving.kv_bytes_per_token);
      if (engine.context_length_tokens) m.max_concurrency = m.kv_cache_left_tokens / *engine.context_length_tokens;
    }

    HostMemory& hm = host_rows[static_cast<size_t>(in.host)];
    if (!host_seen[static_cast<size_t>(in.host)]) {
      host_seen[static_cast<size_t>(in.host)] = true;
      hm.host = in.host;
      hm.name = host.name;
      hm.gpu_memory_bytes = host.gpu_memory_bytes;
      hm.host_memory_bytes = host.host_memory_bytes;
      hm.kv_cache_left_bytes_min = m.kv_cache_left_bytes;
    }
    ++hm.rank_count;
    // Ranks sharing a GPU (ranks_per_gpu) hold their tables on the same one.
    hm.hbm_bytes_per_gpu_max =
        std::max(hm.hbm_bytes_per_gpu_max, checked_mul(hbm, static_cast<uint64_t>(host.ranks_per_gpu)));
    hm.kv_cache_left_bytes_min = std::min(hm.kv_cache_left_bytes_min, m.kv_cache_left_bytes);
    hm.host_table_bytes = checked_add(hm.host_table_bytes, m.host_private_bytes);
    if (copies.first(cost.table_copy, in, static_cast<int>(r))) {
      ++hm.table_copies;
      // A host-wide copy (/dev/shm) is in the host's memory once, whoever maps it.
      hm.shm_bytes = checked_add(hm.shm_bytes, cost.host_shm_bytes);
      hm.shared_copy_bytes = checked_add(hm.shared_copy_bytes, cost.host_shared_copy_bytes);
      // The copy's first rank writes it, as the runtime's writer: its pages are charged there.
      m.shm_written_bytes = checked_add(cost.host_shm_bytes, cost.host_shared_copy_bytes);
      hm.host_table_bytes =
          checked_add(hm.host_table_bytes, checked_add(cost.host_shm_bytes, cost.host_shared_copy_bytes));
    }
  }
  for (size_t h = 0; h < hosts.size(); ++h)
    if (host_seen[h]) plan.hosts.push_back(std::move(host_rows[h]));
  return plan;
}

}  // namespace engram
