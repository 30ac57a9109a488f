// `plan --engine vllm,sglang,engramlab` (--compare-engines): one deployment
// planned under several engines' rules (core/engines/), side by side: the
// placement each builds, its memory, its collectives per decode step and
// what it leaves the KV cache, in a table (a column per engine) and in JSON.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/json_output.h"
#include "core/base/status.h"
#include "core/deployment/deployment.h"
#include "core/deployment/engine_id.h"
#include "core/engines/engine_profile.h"

namespace engram {

// One collective a rank runs per decode step, over every table, with the
// bytes one token puts on it (ids as int64, rows as bf16).
struct StepCollective {
  std::string name;   // "all-gather ids", "reduce-scatter rows", ...
  std::string group;  // "row-shard group of 8", "TP group of 2", ...
  uint64_t bytes_per_token = 0;
};

struct EngineColumn {
  EngineId engine = EngineId::kEngramlab;
  std::string label;             // "vllm", or "vllm+sp-all-to-all" for a variant
  std::string host_layouts;      // the engine's host layouts as it names them, default said
  std::vector<std::string> not_counted;  // what the engine holds beside the tables with no number
  Status status;                 // why the engine refuses or cannot build it (plan not run)
  Status fits;                   // the memory fit's verdict where planned
  std::string placement;         // "host_shared", or "host_shared (ranks 0-3), host_head_sharded (ranks 4-7)"
  std::string tp_split;          // "rows" / "heads"
  bool cpu_offload = false;      // as planned (the engine's default where not written)
  int node_local_group_min = 0, node_local_group_max = 0;
  uint64_t hbm_bytes_per_gpu_max = 0;
  uint64_t host_table_bytes_per_node_max = 0;
  int table_copies_per_node_max = 0;
  std::vector<StepCollective> collectives;  // the busiest rank group's, per decode step
  uint64_t collective_bytes_per_token = 0;
  int64_t kv_cache_left_bytes_min = 0;
  std::string scale_bytes;                  // "0 -> +0, 255 -> +inf"
  std::vector<std::string> warnings;        // warning keys
  // The slowest rank's modelled step time at the deployment's tokens per
  // rank (core/plan/step_time_plan.h), and the calibration behind it.
  double step_time_us_p50 = 0;
  int step_tokens = 0;
  std::string step_calibration;
  std::vector<DefaultUsed> defaults_used;   // what this engine's plan took without it being written
  std::string tightest_limit;               // the host memory limit with the least headroom, "" where none
  // Where the engine refuses a setting only another engine has (peer_shards
  // under vLLM, thp_packing under SGLang, ...): its refusal, and the
  // settings left out for the figures above (planned without them), so the
  // column still answers. status stays ok then.
  std::string refusal;
  std::vector<std::string> planned_without;
  // Where its default host layout cannot run here (SGLang's `shared` memfd
  // across nodes): the refusal above, and the layout the figures were
  // planned with instead ("host_layout: per_rank"), the first it offers that runs.
  std::string planned_with;
  // The deployment the figures above were planned from: as given with this
  // engine set, less planned_without, with planned_with (what `fuzz
  // --compare-engines` runs on the emulator).
  Deployment planned_from;
};

// Plans `deployment` (flags and file as given, engine.profile ignored)
// under each engine in `engines`. A refusal is the column's status, not an
// error: the comparison shows it.
std::vector<EngineColumn> compare_engines(const Deployment& deployment, std::span<const EngineId> engines);
// The same over engines or their variants (`--engine vllm,vllm+sp-all-to-all`).
std::vector<EngineColumn> compare_engines(const Deployment& deployment, std::span<const EngineChoice> engines);

// Leaves out one of the settings an engine may lack (planned_without names
// them: peer_shards, thp_packing, ...), as the comparison did for a column;
// invalid_argument naming the value and those settings otherwise.
Status drop_engine_setting(Deployment& deployment, std::string_view name);

std::string format_engine_comparison(std::span<const EngineColumn> columns);
// The --json document: json_document("plan") with "engines" (a column each,
// in the order asked), "warnings" [] (each engine's are in its column) and
// "error" null.
Json engine_comparison_json(std::span<const EngineColumn> columns);

}  // namespace engram
