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
#include <vector>

#include "core/base/status.h"
#include "core/deployment/deployment.h"
#include "core/deployment/node_local_group.h"
#include "core/deployment/engine_id.h"
#include "core/engines/engine_rule.h"
#include "core/model/table_spec.h"
#include "core/placements/placement.h"

namespace engram {

class RequestHasher;  // core/model/request_hasher.h

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

// How rows come back over a node-local Engram DP group (host head shards,
// and the DP half of a device head-shard group).
enum class RowsBack : uint8_t {
  kAllToAll,          // each rank receives its own tokens' head slices (engramlab; vLLM PR 56435)
  kAllGatherKeepOwn,  // every rank receives every rank's staged rows and keeps its own tokens (vLLM main)
};
// What sequence parallelism does to the TP half of the lookup.
enum class SpRowsBack : uint8_t {
  kAllToAllTokenShards,  // each TP rank receives its own token shard's heads alone (engramlab; vLLM PR 56435)
  kAllGatherKeepSlice,   // an all-gather over TP of every token, each rank keeping its slice (vLLM main)
};
// How a context-parallel prefill gets the ids a CP rank's shard needs.
enum class CpHashing : uint8_t {
  kHaloExchange,              // each CP rank hashes its shard after the n-1 tokens a peer hands it (engramlab)
  kWholePromptAllGatherIds,   // every CP rank hashes the whole prompt, ids all-gathered over CP (SGLang)
};
// What padding tokens look up.
enum class PaddingRule : uint8_t {
  kDead,         // every padding token hashes to DEAD: no row read (engramlab; vLLM's DP-slot padding)
  kSglang,       // graph padding hashes all-pad n-grams to valid rows; DP-attention padding reads row 0 and discards it
};
// How the fallback warnings are worded.
enum class FallbackWording : uint8_t {
  kEngramlab,  // every cause names its fixes (docs/design.md section 3, rule 3)
  kVllm,       // only the /dev/shm-size one names --shm-size / --ipc=host; the others say "per rank"
};

struct EngineProfile;

// Unmerged work (an open PR, a fork) or another reading of the engine, as a
// named variant (`--engine vllm+sp-all-to-all`): its rules over main's,
// never mixed in silently.
struct EngineVariant {
  const char* name;  // "sp-all-to-all": written vllm+sp-all-to-all
  const char* what;  // one line
  RuleSource source;
  std::span<const EngineRule> rules;  // replace main's rules of the same key, or add
  void (*apply)(EngineProfile& profile);  // the variant's data over main's
};

struct EngineProfile {
  EngineId id;
  const char* name;    // "engramlab", "vllm", "sglang": what users write
  const char* source;  // where its rules are read from (files of the engine's tree)
  EngineVersion version{};               // the engine version this profile models
  std::span<const EngineRule> rules;     // every rule it applies, each with its source
  std::span<const EngineVariant> variants;  // main's named variants
  const EngineVariant* variant = nullptr;   // set on a variant's profile

  // Defaults: cpu_offload when the deployment does not write it.
  bool cpu_offload_default = false;
  const char* cpu_offload_default_source = "";

  // How tables split over TP on the device and in host memory.
  TpSplit device_tp_split = TpSplit::kRows;
  TpSplit host_tp_split = TpSplit::kHeads;

  // The UE8M0 scale byte's two ends (0 and 255) as this engine decodes them.
  ScaleByteRule scale_byte_rule = ScaleByteRule::kVllm;
  // Whether a -0 value is written as +0 by every path (engramlab), kept on
  // every path (vLLM), or kept unless the path sums rows (SGLang):
  // lookup_minus_zero resolves it per path.
  MinusZeroRule minus_zero = MinusZeroRule::kWritePlusZero;
  RowsBack rows_back = RowsBack::kAllToAll;
  SpRowsBack sp_rows_back = SpRowsBack::kAllToAllTokenShards;
  CpHashing cp_hashing = CpHashing::kHaloExchange;
  PaddingRule padding = PaddingRule::kDead;
  FallbackWording fallback_wording = FallbackWording::kEngramlab;
  // The engine's verify blocks must be equal per request (it asserts).
  bool equal_verify_blocks = false;
  // Shared memory it holds beside the tables.
  std::span<const EngineHolding> holdings;
  // Refusals at creation, after the placement is decided: the engine's own
  // checks of each host where `placement_by_host[h]` (the placement its
  // ranks build) would be created; ok where none applies.
  Status (*check_at_creation)(const Deployment& deployment, const ModelSpec& model,
                              std::span<const Placement> placement_by_host) = nullptr;

  EngineSettings settings;

  // The host layouts it offers; the first is the default where cpu_offload
  // is on and none is written.
  std::span<const HostLayoutOption> host_layouts;

  // The node-local Engram DP group of every rank of a completed deployment
  // (rank_hosts resolved).
  NodeLocalGroups (*node_local_groups)(const EngineProfile& self, const Deployment& deployment) = nullptr;

  // The config as the engine refuses it, beyond settings and layouts it lacks
  // (validate_for_engine checks those): invalid_argument naming the engine,
  // the field, the value and why (the engine's own reason), or ok. The model
  // gives the head count.
  Status (*validate)(const EngineProfile& self, const Deployment& deployment, const ModelSpec& model) = nullptr;

  // The placement this engine builds where the rules (core/plan/placement_rules.h)
  // decided `decided` for a rank of the (validated) deployment;
  // failed_precondition naming the placement where this build lacks it.
  Result<Placement> (*placement_of)(const EngineProfile& self, const Deployment& deployment, Placement decided) = nullptr;

  // The group this engine cuts its device tables over, where the engine
  // fixes it (vLLM: a replica's TP ranks, or TP x DP with
  // embedding_across_dp); null: config.shard_group as written.
  std::optional<ShardGroup> (*device_shard_group)(const EngineProfile& self, const EngramConfig& config) = nullptr;
};

// "vllm", or "vllm+sp-all-to-all" on a variant's profile.
std::string profile_label(const EngineProfile& engine);
// The rule of `key` this profile applies (a variant's where it replaces
// main's); null where the profile has none.
const EngineRule* find_rule(const EngineProfile& engine, std::string_view key);
// The same, checked: a decision names a rule the profile has.
const EngineRule& rule_of(const EngineProfile& engine, std::string_view key);

// One decision of a plan and the rule of the engine that made it.
struct DecidedBy {
  std::string decision;  // "ranks 0-7: host_head_sharded", "node-local group of 4"
  std::string engine;    // profile_label
  std::string rule_key;
  std::string rule_text;
  std::string source;    // rule_source_text
};
DecidedBy decided_by(const EngineProfile& engine, std::string_view key, std::string decision);

// What the engine holds beside the tables on one host: the bytes counted
// and what no number is known for ("not counted").
struct EngineExtraMemory {
  uint64_t bytes_per_host = 0;
  std::vector<std::string> not_counted;  // "NCCL's /dev/shm segments (...)"
};
EngineExtraMemory engine_extra_memory(const EngineProfile& engine);

// The registration table, in EngineId order (each engine's main).
std::span<const EngineProfile> engine_registry();
const EngineProfile& engine_profile(EngineId id);
// The profile of a variant of `id` ("" is main); the name must be one of its
// variants (parse_engine_choice checks it).
const EngineProfile& engine_profile(EngineId id, std::string_view variant);
// The profile a deployment plans by (engine.profile and engine.variant).
const EngineProfile& engine_profile_of(const EngineMemory& engine);

// `--engine vllm+sp-all-to-all`: the engine and its variant ("" for main).
struct EngineChoice {
  EngineId id = EngineId::kEngramlab;
  std::string variant;
  bool operator==(const EngineChoice&) const = default;
};
// invalid_argument naming `field`, the engine, the variant and the variants
// that exist (an unknown variant, a variant of another engine).
Result<EngineChoice> parse_engine_choice(std::string_view text, std::string_view field);
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
// The -0 rule one lookup path follows under the engine: engramlab writes +0
// on every path; vLLM keeps -0 on every path (it gathers, never sums);
// SGLang keeps it unless `rows_summed`, a path that sums every member's rows
// over more than one member (PlacementOps::sums_members_rows over a group
// above 1), where its all-reduce adds +0. kKeep or kWritePlusZero, never
// kKeepUnlessSummed.
MinusZeroRule lookup_minus_zero(const EngineProfile& engine, bool rows_summed);
// Every table's scale-byte rule and -0 rule (lookup_minus_zero of
// `rows_summed`) set to the engine's: what the runtime decodes by on every
// path of a rank's placement, and the references it is checked against.
void apply_engine_value_rules(const EngineProfile& engine, bool rows_summed, ModelSpec& model);
// The engine's hashing rules on a request hasher: SGLang asserts equal
// verify blocks per request (issue 39173), so a ragged verify is refused.
void apply_engine_hash_rules(const EngineProfile& engine, RequestHasher& hasher);

// Rows one step reads for its padding under the engine's padding rule:
// `graph_padding_tokens` (a captured graph's batch above the real tokens)
// and `dp_padding_tokens` (a DP rank's slot above its tokens, or an idle
// rank's), `heads` rows each where the rule reads a row. vLLM and engramlab
// hash both to DEAD (none read); SGLang reads all-pad rows for graph padding
// and row 0 for DP-attention padding.
int64_t padding_rows_read(const EngineProfile& engine, int64_t graph_padding_tokens, int64_t dp_padding_tokens,
                          int heads);
// Ids a context-parallel rank hashes for a prompt of `prompt_tokens` split
// over `cp` ranks, with n-grams up to `max_order`: its shard plus the n-1
// tokens of halo (engramlab), or the whole prompt (SGLang).
int64_t cp_tokens_hashed_per_rank(const EngineProfile& engine, int64_t prompt_tokens, int cp, int max_order);

}  // namespace engram
