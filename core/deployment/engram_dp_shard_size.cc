#include "core/deployment/engram_dp_shard_size.h"

#include <fmt/format.h>

#include <numeric>
#include <unordered_map>

namespace engram {

Result<int> engram_dp_shard_size(std::span<const int> node_of_rank, int data_parallel_size, int replica_size) {
  if (node_of_rank.empty()) return invalid_argument("engram_dp_shard_size: node_of_rank is empty; give one node per rank");
  if (data_parallel_size < 1)
    return invalid_argument(fmt::format("engram_dp_shard_size: data_parallel_size {} must be at least 1", data_parallel_size));
  if (replica_size < 1)
    return invalid_argument(fmt::format("engram_dp_shard_size: replica_size {} must be at least 1", replica_size));

  const int64_t world = static_cast<int64_t>(node_of_rank.size());
  std::unordered_map<int, int64_t> ranks_on_node;
  for (int node : node_of_rank) ++ranks_on_node[node];
  const int64_t node_count = static_cast<int64_t>(ranks_on_node.size());

  const int64_t per_node_width = node_count * replica_size;
  if (world % per_node_width != 0) return 1;  // replicas per node not whole
  const int64_t replicas_per_node = world / per_node_width;
  const int shard_size = static_cast<int>(std::gcd(static_cast<int64_t>(data_parallel_size), replicas_per_node));
  if (shard_size == 1 || node_count == 1) return shard_size;

  // vLLM compares in_the_same_node_as(start) with range(start, start + width):
  // the block is all on start's node and that node has no other rank.
  const int64_t ranks_per_node = replicas_per_node * replica_size;
  for (int64_t start = 0; start < world; start += ranks_per_node) {
    const int node = node_of_rank[static_cast<size_t>(start)];
    if (ranks_on_node[node] != ranks_per_node) return 1;
    for (int64_t r = start; r < start + ranks_per_node; ++r)
      if (node_of_rank[static_cast<size_t>(r)] != node) return 1;
  }
  return shard_size;
}

}  // namespace engram
