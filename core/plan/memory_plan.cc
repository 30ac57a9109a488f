#include "core/plan/memory_plan.h"

#include <algorithm>
#include <map>

#include "core/model/gpu_models.h"
#include "core/lookup/shard_layout.h"
#include "core/base/units.h"

namespace engram {

uint64_t device_shard_hbm_bytes(const ModelSpec& spec, int shard_count, uint64_t granularity_bytes) {
  ENGRAM_CHECK(shard_count >= 1);
  uint64_t total = 0;
  for (const TableSpec& t : spec.tables) {
    RowShardLayout layout(t.row_count(), shard_count);
    total += round_up(static_cast<uint64_t>(layout.max_shard_rows()) * t.row_bytes(), granularity_bytes);
  }
  return total;
}

uint64_t collective_buffer_bytes(const ModelSpec& spec, int group_size, int tokens_per_rank_max) {
  ENGRAM_CHECK(group_size >= 1 && tokens_per_rank_max >= 0);
  uint64_t widest = 0;
  for (const TableSpec& t : spec.tables)
    widest = std::max(widest, static_cast<uint64_t>(t.head_count()) * static_cast<uint64_t>(t.dim));
  return static_cast<uint64_t>(group_size) * static_cast<uint64_t>(tokens_per_rank_max) * widest * 2;
}

uint64_t head_shard_host_bytes(const ModelSpec& spec, int group_size, int index) {
  ENGRAM_CHECK(group_size >= 1 && index >= 0 && index < group_size);
  uint64_t total = 0;
  for (const TableSpec& t : spec.tables) {
    HeadRange heads = head_shard(t.head_count(), group_size, index);
    int64_t rows = 0;
    for (int h = heads.begin; h < heads.end; ++h) rows += t.primes[static_cast<size_t>(h)];
    total += static_cast<uint64_t>(rows) * t.row_bytes();
  }
  return total;
}

int64_t kv_cache_left_bytes(uint64_t gpu_memory_bytes, const EngineMemory& engine, uint64_t engram_hbm_bytes) {
  ENGRAM_CHECK(engine.gpu_memory_fraction > 0.0 && engine.gpu_memory_fraction <= 1.0);
  const auto budget = static_cast<int64_t>(static_cast<double>(gpu_memory_bytes) * engine.gpu_memory_fraction);
  return budget - static_cast<int64_t>(engram_hbm_bytes) - static_cast<int64_t>(engine.gpu_reserved_bytes.value_or(0));
}

MemoryPlan plan_memory(const ModelSpec& spec, std::span<const HostSpec> hosts,
                       std::span<const RankMemoryInput> ranks, int tokens_per_rank_max, const EngineMemory& engine) {
  const uint64_t table_total = spec.table_bytes_total();
  // Costs depend only on the group size (and index for head shards): cache
  // them so 1,000-rank plans stay linear.
  std::map<int, uint64_t> shard_bytes_by_size, buffer_bytes_by_size;
  std::map<std::pair<int, int>, uint64_t> head_bytes_by_member;
  MemoryPlan plan;
  plan.ranks.resize(ranks.size());
  std::vector<HostMemory> host_rows(hosts.size());
  std::vector<bool> host_has_shared(hosts.size(), false);
  std::vector<bool> host_seen(hosts.size(), false);
  std::map<int, bool> group_counted;

  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankMemoryInput& in = ranks[r];
    ENGRAM_CHECK(in.host >= 0 && static_cast<size_t>(in.host) < hosts.size());
    const HostSpec& host = hosts[static_cast<size_t>(in.host)];
    ENGRAM_CHECK(host.gpu_memory_bytes > 0);
    RankMemory& m = plan.ranks[r];
    m.gpu_memory_bytes = host.gpu_memory_bytes;
    HostMemory& hm = host_rows[static_cast<size_t>(in.host)];
    switch (in.placement) {
      case Placement::kDeviceCollective:
      case Placement::kDevicePeer: {
        auto it = shard_bytes_by_size.find(in.shard_group_size);
        if (it == shard_bytes_by_size.end())
          it = shard_bytes_by_size.emplace(in.shard_group_size,
                                           device_shard_hbm_bytes(spec, in.shard_group_size, kVmmGranularityBytes)).first;
        m.hbm_table_bytes = it->second;
        if (in.placement == Placement::kDeviceCollective) {
          auto b = buffer_bytes_by_size.find(in.shard_group_size);
          if (b == buffer_bytes_by_size.end())
            b = buffer_bytes_by_size.emplace(in.shard_group_size,
                                             collective_buffer_bytes(spec, in.shard_group_size, tokens_per_rank_max)).first;
          m.hbm_buffer_bytes = b->second;
        }
        break;
      }
      case Placement::kHostShared:
        m.host_shared_mapped_bytes = table_total;
        host_has_shared[static_cast<size_t>(in.host)] = true;
        break;
      case Placement::kHostHeadSharded: {
        auto key = std::make_pair(in.node_local_group_size, in.node_local_index);
        auto it = head_bytes_by_member.find(key);
        if (it == head_bytes_by_member.end())
          it = head_bytes_by_member.emplace(key, head_shard_host_bytes(spec, key.first, key.second)).first;
        m.host_private_bytes = it->second;
        if (!group_counted[in.node_local_group]) {
          group_counted[in.node_local_group] = true;
          ++hm.table_copies;
        }
        break;
      }
      case Placement::kHostPrivate:
        m.host_private_bytes = table_total;
        ++hm.table_copies;
        break;
    }
    const uint64_t hbm = m.hbm_table_bytes + m.hbm_buffer_bytes;
    m.kv_budget_bytes = static_cast<uint64_t>(static_cast<double>(m.gpu_memory_bytes) * engine.gpu_memory_fraction);
    m.gpu_reserved_bytes = engine.gpu_reserved_bytes.value_or(0);
    m.kv_cache_left_bytes = kv_cache_left_bytes(m.gpu_memory_bytes, engine, hbm);

    if (!host_seen[static_cast<size_t>(in.host)]) {
      host_seen[static_cast<size_t>(in.host)] = true;
      hm.host = in.host;
      hm.name = host.name;
      hm.gpu_memory_bytes = host.gpu_memory_bytes;
      hm.host_memory_bytes = host.host_memory_bytes;
      hm.kv_cache_left_bytes_min = m.kv_cache_left_bytes;
    }
    ++hm.rank_count;
    hm.hbm_bytes_per_gpu_max = std::max(hm.hbm_bytes_per_gpu_max, hbm);
    hm.kv_cache_left_bytes_min = std::min(hm.kv_cache_left_bytes_min, m.kv_cache_left_bytes);
    hm.host_table_bytes += m.host_private_bytes;
  }
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (!host_seen[h]) continue;
    HostMemory& hm = host_rows[h];
    if (host_has_shared[h]) {
      hm.shm_bytes = table_total;
      hm.host_table_bytes += table_total;
      ++hm.table_copies;
    }
    plan.hosts.push_back(std::move(hm));
  }
  return plan;
}

}  // namespace engram
