// An engine profile: one inference engine's rules for the Engram tables, so
// engramlab predicts what that engine builds (docs/design.md section 9). One
// interface (this file), one file per engine (engramlab_profile.cc,
// vllm_profile.cc, sglang_profile.cc) and one registration table
// (engine_registry.cc), as the placements are kept. The plan, the runtime,
// the emulator and the report ask the profile; nothing else switches over
// engine names.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "core/deployment/deployment.h"
#include "core/deployment/node_local_group.h"
#include "core/deployment/engine_id.h"
#include "core/model/table_spec.h"
#include "core/placements/placement.h"

namespace engram {

// How a table is split over the TP ranks of a replica.
enum class TpSplit : uint8_t {
  kRows,   // rank r owns rows [N*r/tp, N*(r+1)/tp): zero-fill and sum
  kHeads,  // rank r holds every row of its padded head shard [T, ceil(H/tp), D]
};
const char* tp_split_name(TpSplit split);  // "rows", "heads"

// A host layout as the engine names it, and the placement that builds it
// (asked of the placement registry by name: a layout whose placement this
// build lacks is a failed_precondition naming it). placement "" is "the
// engine's rules decide" (its `auto`).
struct HostLayoutOption {
  const char* name;       // as the engine's users write it
  const char* placement;  // the placement registry's name, or "" for the rules
  const char* what;       // one line for help and errors
};

// The settings of config: an engine without one refuses it where written
// (dp_shared_memory counts as written when not unset).
struct EngineSettings {
  bool dp_shared_memory = false;     // vLLM's (seed 001); engramlab's
  bool peer_shards = false;          // SGLang's (seed 000); engramlab's
  bool embedding_across_dp = false;  // vLLM's
  bool thp_packing = false;          // vLLM's
};

struct EngineProfile {
  EngineId id;
  const char* name;    // "engramlab", "vllm", "sglang": what users write
  const char* source;  // where its rules are read from (files of the engine's tree)

  // Defaults: cpu_offload when the deployment does not write it.
  bool cpu_offload_default = false;
  const char* cpu_offload_default_source = "";

  // How tables split over TP on the device and in host memory.
  TpSplit device_tp_split = TpSplit::kRows;
  TpSplit host_tp_split = TpSplit::kHeads;

  // The UE8M0 scale byte's two ends (0 and 255) as this engine decodes them.
  ScaleByteRule scale_byte_rule = ScaleByteRule::kVllm;

  EngineSettings settings;

  // The host layouts it offers; the first is the default where cpu_offload
  // is on and none is written.
  std::span<const HostLayoutOption> host_layouts;

  // The node-local Engram DP group of every rank of a completed deployment
  // (rank_hosts resolved).
  NodeLocalGroups (*node_local_groups)(const Deployment& deployment) = nullptr;

  // The config as the engine refuses it, beyond settings and layouts it lacks
  // (validate_for_engine checks those): invalid_argument naming the engine,
  // the field, the value and why (the engine's own reason), or ok. The model
  // gives the head count.
  Status (*validate)(const Deployment& deployment, const ModelSpec& model) = nullptr;

  // The placement this engine builds where the rules (core/plan/placement_rules.h)
  // decided `decided` for a rank of the (validated) deployment;
  // failed_precondition naming the placement where this build lacks it.
  Result<Placement> (*placement_of)(const Deployment& deployment, Placement decided) = nullptr;

  // The group this engine cuts its device tables over, where the engine
  // fixes it (vLLM: a replica's TP ranks, or TP x DP with
  // embedding_across_dp); null: config.shard_group as written.
  std::optional<ShardGroup> (*device_shard_group)(const EngramConfig& config) = nullptr;
};

// The registration table, in EngineId order.
std::span<const EngineProfile> engine_registry();
const EngineProfile& engine_profile(EngineId id);
const char* engine_name(EngineId id);
// "engramlab, vllm or sglang".
std::string engine_names_text();
// An engine by name: invalid_argument naming `field`, the value, the known
// names and the closest one.
Result<EngineId> parse_engine(std::string_view name, std::string_view field);

// What every profile shares.

// Everything the engine refuses of a completed deployment: settings it does
// not have, a host layout it does not offer, then its own validate.
Status validate_for_engine(const EngineProfile& engine, const Deployment& deployment, const ModelSpec& model);

// The placement registered as `name`, or failed_precondition naming the
// engine, what asked for it and that this build lacks it.
Result<Placement> placement_named(const EngineProfile& engine, std::string_view name, std::string_view asked_by);
// The host layout `config.host_layout` names (the default where empty), or
// invalid_argument: a layout the engine does not have, with the engines
// that do.
Result<const HostLayoutOption*> host_layout_of(const EngineProfile& engine, const EngramConfig& config);
// The host layout's placement where it names one, else `decided`.
Result<Placement> host_layout_placement(const EngineProfile& engine, const EngramConfig& config, Placement decided);
// The refusal every engine words the same way: "engine E refuses FIELD
// (VALUE): WHY; FIX".
Status engine_refuses(const EngineProfile& engine, std::string_view field, std::string_view value,
                      std::string_view why, std::string_view fix);
// The engine's defaults applied to what the deployment did not write,
// each announced in defaults_used (cpu_offload: turned on where the engine's
// default is on or a host layout is written; never turned off).
void apply_engine_defaults(const EngineProfile& engine, Deployment& deployment);
// "0 -> +0, 255 -> +inf": how the engine decodes scale bytes 0 and 255.
std::string scale_bytes_text(const EngineProfile& engine);
// Every table's scale-byte rule set to the engine's.
void apply_engine_scale_rule(const EngineProfile& engine, ModelSpec& model);

}  // namespace engram
