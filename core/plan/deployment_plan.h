// `plan`: everything decided about a deployment before anything runs
// (docs/design.md sections 1-3): the resolved config, each rank's placement and
// groups, the memory it costs, the warnings and the reason for each decision.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/backend/device_memory.h"
#include "core/plan/config_resolution.h"
#include "core/deployment/deployment.h"
#include "core/engines/engine_profile.h"
#include "core/plan/memory_plan.h"
#include "core/plan/placement_rules.h"
#include "core/placements/placement.h"
#include "core/base/status.h"
#include "core/base/warnings.h"

namespace engram {

struct ModelSummary {
  std::string name;
  std::vector<int> layer_ids;
  std::vector<int> heads_per_table;
  std::vector<int64_t> rows_per_table;
  std::vector<uint64_t> table_bytes;
  uint64_t row_bytes = 0;
  uint64_t table_bytes_total = 0;
  // How tokens become row ids (the model's token space).
  int64_t compressed_vocab_size = 0;
  int64_t pad_id = 0;
  std::string dead_tokens;
  uint64_t hash_seed = 0;
  std::string source_path;         // the model file ("" for a built-in model)
  uint64_t kv_bytes_per_token = 0; // the model file's serving figure; 0: not given
  std::string row_format;          // "fp8_e4m3_ue8m0" or "bf16"
};

struct RankPlan {
  int rank = 0;
  int tp_rank = 0;
  int dp_rank = 0;
  int host = -1;
  Placement placement = Placement::kDeviceCollective;
  int node_local_group = -1;
  int node_local_group_size = 1;
  int node_local_index = 0;
  int shard_group = -1;        // device placements; -1 for host placements
  int shard_group_size = 0;
  int shard_index = -1;
  RankMemory memory;
};

// Ranks that decided alike, summarised: "ranks 0-3: host_shared, groups of 4".
struct PlacementGroupSummary {
  Placement placement = Placement::kDeviceCollective;
  int group_size = 0;                     // node-local (host placements) or shard group size
  int group_count = 0;
  std::vector<int> ranks;
  std::string ranks_text;                 // "0-3, 8-11"
  std::optional<HandleType> handle_type;  // device_peer only
  std::string reason;
};

struct PlanResult {
  ModelSummary model;
  Deployment deployment;  // completed: defaults filled, rank_hosts resolved
  DpSharedMemoryResolution dp_shared_memory;
  std::vector<RankPlan> ranks;
  std::vector<PlacementGroupSummary> groups;
  std::vector<Warning> warnings;   // deduped by key
  std::vector<std::string> reasons;
  std::vector<HostMemory> hosts;   // hosts that hold ranks
  std::vector<MemoryLimitScope> memory_limits;  // the deployment's (plan) or the gathered cgroups' (runtime)
  // plan --explain: each decision and the rule of the engine that made it.
  std::vector<DecidedBy> decided_by;
  // What the engine holds beside the tables on each host: bytes counted and
  // what is "not counted" (core/engines/engine_profile.h engine_extra_memory).
  EngineExtraMemory engine_extra;
};

// invalid_argument for bad input; failed_precondition when an explicit
// dp_shared_memory: true cannot work or a device_peer group has no handle
// type. Warnings go to `sink` (deduped there: once per process) and into the
// result. Linear in ranks.
Result<PlanResult> plan_deployment(const Deployment& deployment, WarningSink& sink);

}  // namespace engram
