#include "core/deployment/shard_groups.h"

#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace engram {

namespace {

struct ShardGroupName {
  ShardGroup kind;
  const char* name;
  const char* meaning;
};
constexpr ShardGroupName kShardGroupNames[] = {
    {ShardGroup::kWorld, "world", "every rank"},
    {ShardGroup::kNvlinkDomain, "nvlink_domain", "each NVLink domain's ranks"},
    {ShardGroup::kHost, "host", "each host's ranks"},
    {ShardGroup::kReplica, "replica", "each DP replica's TP ranks"},
    {ShardGroup::kEngramDp, "engram_dp", "every TP rank of each node-local Engram DP group's replicas (TP x Engram DP)"},
};

// kEngramDp's groups (see the header).
ShardGroups engram_dp_groups(const NodeLocalGroups& local, size_t world, int tp) {
  ENGRAM_CHECK(local.group_by_rank.size() == world && world % static_cast<size_t>(tp) == 0);
  const size_t replicas = world / static_cast<size_t>(tp);
  std::map<int, int> group_of_local;  // TP rank 0's node-local group -> dense id
  std::vector<int> replicas_in_group, group_of_replica(replicas), place_of_replica(replicas);
  for (size_t d = 0; d < replicas; ++d) {
    const auto [it, inserted] = group_of_local.emplace(local.group_by_rank[d * static_cast<size_t>(tp)],
                                                       static_cast<int>(replicas_in_group.size()));
    if (inserted) replicas_in_group.push_back(0);
    group_of_replica[d] = it->second;
    place_of_replica[d] = replicas_in_group[static_cast<size_t>(it->second)]++;
  }
  ShardGroups out;
  out.group_by_rank.resize(world);
  out.size_by_rank.resize(world);
  out.index_by_rank.resize(world);
  for (size_t r = 0; r < world; ++r) {
    const size_t d = r / static_cast<size_t>(tp);
    const int g = group_of_replica[d], in_group = replicas_in_group[static_cast<size_t>(g)];
    out.group_by_rank[r] = g;
    out.size_by_rank[r] = in_group * tp;
    out.index_by_rank[r] = static_cast<int>(r % static_cast<size_t>(tp)) * in_group + place_of_replica[d];
  }
  out.group_count = static_cast<int>(replicas_in_group.size());
  return out;
}

}  // namespace

const char* shard_group_name(ShardGroup kind) {
  for (const ShardGroupName& n : kShardGroupNames)
    if (n.kind == kind) return n.name;
  ENGRAM_CHECK_MSG(false, "a ShardGroup without a name in kShardGroupNames");
  return "?";
}

const char* shard_group_meaning(ShardGroup kind) {
  for (const ShardGroupName& n : kShardGroupNames)
    if (n.kind == kind) return n.meaning;
  ENGRAM_CHECK_MSG(false, "a ShardGroup without a name in kShardGroupNames");
  return "?";
}

std::optional<ShardGroup> shard_group_from_name(std::string_view name) {
  for (const ShardGroupName& n : kShardGroupNames)
    if (name == n.name) return n.kind;
  return std::nullopt;
}

std::string shard_group_choices() {
  std::string out;
  const size_t count = std::size(kShardGroupNames);
  for (size_t i = 0; i < count; ++i)
    out += std::string(i == 0 ? "" : i + 1 == count ? " or " : ", ") + kShardGroupNames[i].name;
  return out;
}

ShardGroups compute_shard_groups(ShardGroup kind, std::span<const int> rank_hosts,
                                 std::span<const HostSpec> hosts, int tp, const NodeLocalGroups* local) {
  ENGRAM_CHECK(!hosts.empty() && tp >= 1);
  if (kind == ShardGroup::kEngramDp) {
    ENGRAM_CHECK_MSG(local != nullptr, "shard_group engram_dp is cut from the node-local groups");
    return engram_dp_groups(*local, rank_hosts.size(), tp);
  }
  // Key per host: the group its ranks join. '\n' cannot occur in names from
  // YAML scalars we accept as keys here, so it separates the parts safely.
  std::vector<std::string> host_key(hosts.size());
  for (size_t h = 0; h < hosts.size(); ++h) {
    const HostSpec& host = hosts[h];
    switch (kind) {
      case ShardGroup::kWorld: host_key[h] = "world"; break;
      case ShardGroup::kNvlinkDomain:
        host_key[h] = host.nvlink_domain.empty() ? "host\n" + host.name + "\n" + host.boot_id
                                                 : "domain\n" + host.nvlink_domain;
        break;
      case ShardGroup::kHost: host_key[h] = "host\n" + host.name + "\n" + host.boot_id; break;
      case ShardGroup::kReplica: break;  // by rank, below
      case ShardGroup::kEngramDp: break;  // above
    }
  }
  std::map<std::string, int> group_of_key;
  std::vector<int> host_group(hosts.size(), -1);
  ShardGroups out;
  std::vector<int> sizes;
  out.group_by_rank.resize(rank_hosts.size());
  out.index_by_rank.resize(rank_hosts.size());
  out.size_by_rank.resize(rank_hosts.size());
  for (size_t r = 0; r < rank_hosts.size(); ++r) {
    const int h = rank_hosts[r];
    ENGRAM_CHECK(h >= 0 && static_cast<size_t>(h) < hosts.size());
    // A replica's ranks are contiguous (rank = dp_rank x tp + tp_rank), wherever they sit.
    int replica_group = -1;
    int& g = kind == ShardGroup::kReplica ? replica_group : host_group[static_cast<size_t>(h)];
    if (g < 0) {
      const std::string key = kind == ShardGroup::kReplica ? "replica\n" + std::to_string(static_cast<int>(r) / tp)
                                                            : host_key[static_cast<size_t>(h)];
      auto [it, inserted] = group_of_key.emplace(key, static_cast<int>(sizes.size()));
      if (inserted) sizes.push_back(0);
      g = it->second;
    }
    out.group_by_rank[r] = g;
    out.index_by_rank[r] = sizes[static_cast<size_t>(g)]++;
  }
  for (size_t r = 0; r < rank_hosts.size(); ++r)
    out.size_by_rank[r] = sizes[static_cast<size_t>(out.group_by_rank[r])];
  out.group_count = static_cast<int>(sizes.size());
  return out;
}

}  // namespace engram
