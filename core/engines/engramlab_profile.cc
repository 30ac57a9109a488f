// engramlab's own rules, today's and unchanged: SGLang's device layout (row
// shards over TP, zero-fill and sum), vLLM's host layouts decided by
// dp_shared_memory (docs/design.md section 3), the node-local group from the
// real rank -> host map (core/deployment/node_local_group.h), vLLM's decoding
// of scale bytes 0 and 255.
#include <fmt/format.h>

#include "core/engines/engine_profiles.h"

namespace engram {
namespace {

constexpr RuleSource kRulesSection = {"engramlab", "docs/design.md section 3 (seeds 000 and 001)", "this tree",
                                      SourceState::kEngramlab};
constexpr RuleSource kLookupSection = {"engramlab", "docs/design.md section 4", "this tree", SourceState::kEngramlab};
constexpr RuleSource kHashSection = {"engramlab", "docs/design.md section 10", "this tree", SourceState::kEngramlab};
constexpr RuleSource kNcclShm = {"NVIDIA/nccl", "src/transport/shm.cc (SHM transport segments in /dev/shm)", "",
                                 SourceState::kStoredReading};

constexpr EngineRule kRules[] = {
    {rule_key::kCpuOffloadDefault, "cpu_offload off unless written", kRulesSection},
    {rule_key::kDeviceTpSplit, "device tables split by rows over the shard group", kRulesSection},
    {rule_key::kHostTpSplit, "host tables split by heads (a TP slice per rank)", kRulesSection},
    {rule_key::kNodeLocalGroup, "for each TP rank, the DP replicas whose ranks sit on one host (the real rank -> "
                                "host map)",
     kRulesSection},
    {rule_key::kHostLayouts, "no layout names: the dp_shared_memory rules decide", kRulesSection},
    {rule_key::kDevicePlacement, "cpu_offload off: device_collective; peer_shards: device_peer", kRulesSection},
    {rule_key::kHostPlacement, "dp_shared_memory enabled: host_shared, falling back to host_head_sharded; disabled: "
                               "host_private",
     kRulesSection},
    {rule_key::kRowsBack, "rows back by an all-to-all over the node-local group", kRulesSection},
    {rule_key::kSequenceParallel, "each TP rank receives its own token shard alone", kRulesSection},
    {rule_key::kMinusZero, "-0 written as +0 on every path, so every path equals the collective one", kLookupSection},
    {rule_key::kScaleBytes, "UE8M0 scale byte 0 -> +0, 255 -> +inf", kLookupSection},
    {rule_key::kShmAtCreation, "the /dev/shm total decides; free space is met where the table is written",
     kRulesSection},
    {rule_key::kVerifyBlocks, "verify blocks may differ in length per request", kHashSection},
    {rule_key::kContextParallel, "prefill CP: each rank hashes its shard after a halo of n-1 tokens from its "
                                 "predecessor",
     kHashSection},
    {rule_key::kPadding, "padding and idle DP slots hash to DEAD: no row read", kHashSection},
    {rule_key::kFallbackWarnings, "one warning per cause, each naming its fixes (--shm-size / --ipc=host, "
                                  "co-location)",
     kRulesSection},
    {rule_key::kRefusals, "strict dp_shared_memory: true names each unmet requirement", kRulesSection},
    {rule_key::kExtraMemory, "beside the tables: NCCL's /dev/shm segments, not counted", kNcclShm},
};

constexpr EngineHolding kHoldings[] = {
    {"NCCL's /dev/shm segments (SHM transport between a node's GPUs)", 0, "/dev/shm", kNcclShm},
};

constexpr HostLayoutOption kLayouts[] = {
    {"auto", "", "the dp_shared_memory rules: host_shared, host_head_sharded on fallback, host_private"},
};

NodeLocalGroups groups(const EngineProfile&, const Deployment& d) {
  return compute_node_local_groups(d.layout, d.rank_hosts, static_cast<int>(d.hosts.size()));
}

// Nothing beyond the settings it lacks: its rules accept every layout.
Status validate(const EngineProfile&, const Deployment&, const ModelSpec&) { return Status::ok(); }

Result<Placement> placement_of(const EngineProfile& self, const Deployment& d, Placement decided) {
  return host_layout_placement(self, d.config, decided);
}

}  // namespace

const EngineProfile kEngramlabProfile = {
    .id = EngineId::kEngramlab,
    .name = "engramlab",
    .source = "docs/design.md sections 2-3 (seeds 000 and 001)",
    .version = {"this tree", "", "engramlab's own rules"},
    .rules = kRules,
    .cpu_offload_default = false,
    .cpu_offload_default_source = "engramlab: off",
    .device_tp_split = TpSplit::kRows,
    .host_tp_split = TpSplit::kHeads,
    .scale_byte_rule = ScaleByteRule::kVllm,
    .holdings = kHoldings,
    .settings = {.dp_shared_memory = true, .peer_shards = true},
    .host_layouts = kLayouts,
    .node_local_groups = groups,
    .validate = validate,
    .placement_of = placement_of,
};

}  // namespace engram
