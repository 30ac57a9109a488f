// The node-local Engram DP group (docs/design.md section 3): for each TP rank t,
// the DP replicas whose rank for t sits on the same host. Built from the real
// rank -> host map, so an interleaved map still groups by host. A replica that
// straddles hosts breaks every host it touches: each rank there gets a group
// of size 1 (node boundaries not aligned with replica rank ranges).
#pragma once

#include <span>
#include <vector>

#include "core/deployment/deployment.h"

namespace engram {

struct NodeLocalGroups {
  std::vector<int> group_by_rank;  // group id, dense from 0 in order of first rank
  std::vector<int> size_by_rank;   // members of the rank's group
  std::vector<int> index_by_rank;  // position in the group, by DP rank (its head shard)
  std::vector<bool> host_misaligned;  // per host: some replica straddles it
  int group_count = 0;
};

// `rank_hosts` has tp * dp entries, each in [0, host_count). O(ranks).
NodeLocalGroups compute_node_local_groups(const ParallelLayout& layout, std::span<const int> rank_hosts,
                                          int host_count);

}  // namespace engram
