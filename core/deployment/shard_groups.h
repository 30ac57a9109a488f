// Which ranks share one sharded device table (device_collective,
// device_peer, device_head_sharded): the whole world, each NVLink domain (a
// host with no domain is its own group), each host (by identity: hostname +
// boot id, so two containers of one machine share a group), each replica's
// TP ranks, or every TP rank of the replicas of one node-local Engram DP
// group (the engine's, core/deployment/node_local_group.h). Shard count =
// group size.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/deployment/deployment.h"
#include "core/deployment/node_local_group.h"

namespace engram {

struct ShardGroups {
  std::vector<int> group_by_rank;  // dense ids in order of first rank
  std::vector<int> size_by_rank;
  std::vector<int> index_by_rank;  // the rank's shard within its group
  int group_count = 0;
};

// The names users write (YAML `shard_group`, --shard-group), spelled only in
// shard_groups.cc: "world", "nvlink_domain", "host", "replica", "engram_dp".
const char* shard_group_name(ShardGroup kind);
// What a group of the kind holds, for reports ("each DP replica's TP ranks").
const char* shard_group_meaning(ShardGroup kind);
std::optional<ShardGroup> shard_group_from_name(std::string_view name);
std::string shard_group_choices();  // "world, nvlink_domain, host, replica or engram_dp", for errors

// `hosts` must be complete (boot ids filled); `tp` cuts kReplica's and
// kEngramDp's groups (rank = dp_rank x tp + tp_rank). kEngramDp needs the
// node-local groups `local` of every rank: a replica joins the group its TP
// rank 0 is in, with all its TP ranks, numbered TP-major as vLLM numbers its
// head shards (engram_head_shard_rank: tp_rank x replicas + the replica's
// place in the group); where the group falls back to one replica, the
// replica's TP ranks alone. O(ranks log hosts).
ShardGroups compute_shard_groups(ShardGroup kind, std::span<const int> rank_hosts,
                                 std::span<const HostSpec> hosts, int tp = 1, const NodeLocalGroups* local = nullptr);

}  // namespace engram
