// Which ranks share one row-sharded device table (device_collective and
// device_peer): the whole world, each NVLink domain (a host with no domain is
// its own group), or each host (by identity: hostname + boot id, so two
// containers of one machine share a group). Shard count = group size.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/deployment/deployment.h"

namespace engram {

struct ShardGroups {
  std::vector<int> group_by_rank;  // dense ids in order of first rank
  std::vector<int> size_by_rank;
  std::vector<int> index_by_rank;  // the rank's shard within its group
  int group_count = 0;
};

// The names users write (YAML `shard_group`, --shard-group), spelled only in
// shard_groups.cc: "world", "nvlink_domain", "host", "replica".
const char* shard_group_name(ShardGroup kind);
std::optional<ShardGroup> shard_group_from_name(std::string_view name);
std::string shard_group_choices();  // "world, nvlink_domain, host or replica", for errors

// `hosts` must be complete (boot ids filled); `tp` cuts kReplica's groups
// (rank = dp_rank x tp + tp_rank). O(ranks log hosts).
ShardGroups compute_shard_groups(ShardGroup kind, std::span<const int> rank_hosts,
                                 std::span<const HostSpec> hosts, int tp = 1);

}  // namespace engram
