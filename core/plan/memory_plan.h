// Memory each placement costs, per rank (GPU) and per host (DESIGN.md
// section 2 and rule 7). Device placements: the row shard, rounded up to the
// VMM granularity, per table; device_collective also needs its gather buffer.
// Host placements: host_shared one copy per host, host_head_sharded one table
// set per node-local group (split over its members), host_private one per rank.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/deployment/deployment.h"
#include "core/plan/placement.h"
#include "core/model/table_spec.h"

namespace engram {

// Sum over tables of round_up(max_shard_rows * row_bytes, granularity).
uint64_t device_shard_hbm_bytes(const ModelSpec& spec, int shard_count, uint64_t granularity_bytes);
// [group x tokens_per_rank_max x heads x dim] bf16, one buffer reused by every
// layer (layers run one after another), sized for the widest table.
uint64_t collective_buffer_bytes(const ModelSpec& spec, int group_size, int tokens_per_rank_max);
// Host bytes of the heads member `index` of a `group_size` group holds, all tables.
uint64_t head_shard_host_bytes(const ModelSpec& spec, int group_size, int index);

struct RankMemoryInput {
  int host = -1;
  Placement placement = Placement::kDeviceCollective;
  int shard_group_size = 1;       // device placements
  int node_local_group = -1;      // host placements
  int node_local_group_size = 1;
  int node_local_index = 0;
};

struct RankMemory {
  uint64_t gpu_memory_bytes = 0;
  uint64_t hbm_table_bytes = 0;    // row shards, granularity-rounded
  uint64_t hbm_buffer_bytes = 0;   // device_collective gather buffer
  uint64_t kv_budget_bytes = 0;    // gpu memory x the engine's memory fraction
  uint64_t gpu_reserved_bytes = 0; // weights etc. the user gave (0 when not counted)
  int64_t kv_cache_left_bytes = 0; // kv_cache_left(): budget - tables - buffer - reserved; negative: nothing left
  uint64_t host_private_bytes = 0; // host memory this rank allocates itself
  uint64_t host_shared_mapped_bytes = 0;  // a node's shared copy this rank maps (not extra memory)
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

// `hosts` complete (gpu_memory_bytes set). O(ranks + distinct group sizes).
MemoryPlan plan_memory(const ModelSpec& spec, std::span<const HostSpec> hosts,
                       std::span<const RankMemoryInput> ranks, int tokens_per_rank_max,
                       const EngineMemory& engine = {});

}  // namespace engram
