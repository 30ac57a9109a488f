// The memory a deployment costs, per rank (GPU) and per host, summed from
// what each rank's placement says it costs (core/placements/placement.h
// PlacementOps::cost): HBM for device shards and buffers, host memory a rank
// allocates, /dev/shm a host holds, and the whole table sets ("copies") in a
// host's memory. Plan shows a device shard's HBM and what it leaves for the
// KV cache.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/deployment/deployment.h"
#include "core/model/table_spec.h"
#include "core/placements/placement.h"

namespace engram {

struct RankMemoryInput {
  int host = -1;
  Placement placement = Placement::kDeviceCollective;
  int shard_group_size = 1;       // device placements
  int node_local_group = -1;      // host placements
  int node_local_group_size = 1;
  int node_local_index = 0;
  int tp_size = 1;  // host placements hold TP slices
  int tp_rank = 0;
  int shard_index = 0;  // in the shard group (device placements)
  int numa_node = 0;  // its GPU's socket on its host (TableCopyScope::kNumaNode)
};

struct RankMemory {
  uint64_t gpu_memory_bytes = 0;
  uint64_t hbm_table_bytes = 0;    // row shards, granularity-rounded
  uint64_t hbm_buffer_bytes = 0;   // device lookup buffers (device_collective's gather buffer)
  uint64_t kv_budget_bytes = 0;    // gpu memory x the engine's memory fraction
  uint64_t gpu_reserved_bytes = 0; // weights etc. the user gave (0 when not counted)
  int64_t kv_cache_left_bytes = 0; // kv_cache_left(): budget - tables - buffer - reserved; negative: nothing left
  // From the model's KV bytes per token (-1: the model gives none): what
  // the KV cache left holds, and how many requests of the engine's context
  // length fit (-1: no context length given).
  int64_t kv_cache_left_tokens = -1;
  int64_t max_concurrency = -1;
  uint64_t host_private_bytes = 0; // host memory this rank allocates itself
  uint64_t host_shared_mapped_bytes = 0;  // a node's shared copy this rank maps (not extra memory)
  // The node's /dev/shm copy where this rank writes it (its host's first
  // rank): tmpfs pages are charged to the memory cgroup of their writer.
  uint64_t shm_written_bytes = 0;
  uint64_t host_pinned_bytes = 0;  // its device lookup's staging of host rows (pinned)
  // What a memory limit over this rank is charged with.
  uint64_t limit_charged_bytes() const { return host_private_bytes + shm_written_bytes + host_pinned_bytes; }
};

// A memory limit over some ranks: a rank's own (memory_limit_per_rank, a
// cgroup per rank), or a container's or pod's over every rank it holds.
// From the deployment's fields (plan) or the ranks' gathered facts (the
// runtime, which sees the cgroups).
struct MemoryLimitScope {
  int host = -1;           // where its ranks run
  std::vector<int> ranks;  // world ranks, ascending
  uint64_t limit_bytes = 0;
};

struct HostMemory {
  int host = -1;
  std::string name;
  int rank_count = 0;
  uint64_t gpu_memory_bytes = 0;
  uint64_t host_memory_bytes = 0;      // the host's RAM (given or its model's default)
  uint64_t hbm_bytes_per_gpu_max = 0;  // tables + buffer on its busiest GPU
  int64_t kv_cache_left_bytes_min = 0;
  uint64_t shm_bytes = 0;              // /dev/shm used by the shared copy
  uint64_t shared_copy_bytes = 0;      // shared copies outside /dev/shm (memfds, a table file's page cache)
  uint64_t host_table_bytes = 0;       // all Engram table bytes in this host's memory
  int table_copies = 0;                // whole table sets in host memory
};

struct MemoryPlan {
  std::vector<RankMemory> ranks;
  std::vector<HostMemory> hosts;  // hosts with at least one rank, in host order
};

// What the KV cache gets on one GPU: gpu_memory x fraction, less the Engram
// tables and buffer, less what the engine reserves. Negative: none.
int64_t kv_cache_left_bytes(uint64_t gpu_memory_bytes, const EngineMemory& engine, uint64_t engram_hbm_bytes);

// The limits the deployment writes: each rank's memory_limit_per_rank, and
// each host entry's memory_limit over all its ranks.
// `completed`: validate_and_complete's output (rank_hosts resolved).
std::vector<MemoryLimitScope> memory_limit_scopes(const Deployment& completed);

// `hosts` complete (gpu_memory_bytes set) and within the deployment's caps
// (validate_and_complete): sizes at most kMaxSizeBytes, at most kMaxRanks
// ranks and kMaxTokensPerRank tokens, so no sum here can wrap (the
// arithmetic is checked and stops the program if one would).
// O(ranks + distinct cost inputs): costs are computed once per (placement,
// PlacementCostInput).
MemoryPlan plan_memory(const ModelSpec& spec, std::span<const HostSpec> hosts,
                       std::span<const RankMemoryInput> ranks, int tokens_per_rank_max,
                       const EngineMemory& engine = {});

}  // namespace engram
