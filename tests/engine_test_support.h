// Deployments the engine-profile tests share: a GB200 host, and a world
// written as vLLM's tests write it (a node id per rank).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/deployment/deployment.h"

namespace engram::testing {

inline HostSpec gb200_host(std::string name, int gpus, uint64_t tmpfs_bytes = 0) {
  HostSpec h;
  h.name = std::move(name);
  h.gpu_count = gpus;
  h.gpu_model = "GB200";
  h.host_memory_bytes = 4ull << 40;
  h.tmpfs_bytes_total = tmpfs_bytes;
  return h;
}

// `node_of_rank` as vLLM's tests write it: the world's node per rank; the
// Engram ranks are the first dp x replica_size of it, the rest extra ranks.
// Host tables (cpu_offload on): the group decides their sharing.
inline Deployment vllm_world_of(const std::vector<int>& node_of_rank, int dp, int replica_size, EngineId engine) {
  Deployment d;
  int nodes = 0;
  for (int n : node_of_rank) nodes = std::max(nodes, n + 1);
  for (int n = 0; n < nodes; ++n)
    d.hosts.push_back(gb200_host("node" + std::to_string(n),
                                 static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.end(), n))));
  d.layout.tp = replica_size;
  d.layout.dp = dp;
  d.layout.extra_ranks = static_cast<int>(node_of_rank.size()) - dp * replica_size;
  d.rank_hosts.assign(node_of_rank.begin(), node_of_rank.begin() + dp * replica_size);
  d.config.cpu_offload = true;
  d.config.cpu_offload_given = true;
  d.engine.profile = engine;
  return d;
}

}  // namespace engram::testing
