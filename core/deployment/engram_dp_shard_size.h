// vLLM's node-local Engram DP group size, ported from its
// `_engram_dp_shard_size(world_size, data_parallel_size, replica_size)`
// (vllm/distributed/parallel_state.py) so an engine profile can predict what
// vLLM builds. It differs from ours (node_local_group.h) on purpose: vLLM
// asks for whole replicas per node, equal nodes and contiguous rank ranges,
// and otherwise falls back to 1; we group by the real host map.
//   replicas per node = world / (nodes x replica_size), not whole: 1
//   size = gcd(dp, replicas per node); one node: that size
//   more nodes: every node must hold exactly the ranks
//   [start, start + replicas per node x replica_size) for start stepping by
//   that width from 0, else 1.
#pragma once

#include <span>

#include "core/base/status.h"

namespace engram {

// `node_of_rank[r]` names rank r's node (any ints; equal means one node), so
// the world is its size and need not be dp x replica_size. Errors name the
// argument: an empty world, data_parallel_size or replica_size below 1.
Result<int> engram_dp_shard_size(std::span<const int> node_of_rank, int data_parallel_size, int replica_size);

}  // namespace engram
