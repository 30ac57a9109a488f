// engramlab's own rules, today's and unchanged: SGLang's device layout (row
// shards over TP, zero-fill and sum), vLLM's host layouts decided by
// dp_shared_memory (docs/design.md section 3), the node-local group from the
// real rank -> host map (core/deployment/node_local_group.h), vLLM's decoding
// of scale bytes 0 and 255.
#include <fmt/format.h>

#include "core/engines/engine_profiles.h"

namespace engram {
namespace {

constexpr HostLayoutOption kLayouts[] = {
    {"auto", "", "the dp_shared_memory rules: host_shared, host_head_sharded on fallback, host_private"},
};

NodeLocalGroups groups(const Deployment& d) {
  return compute_node_local_groups(d.layout, d.rank_hosts, static_cast<int>(d.hosts.size()));
}

// Nothing beyond the settings it lacks: its rules accept every layout.
Status validate(const Deployment&, const ModelSpec&) { return Status::ok(); }

Result<Placement> placement_of(const Deployment& d, Placement decided) {
  return host_layout_placement(kEngramlabProfile, d.config, decided);
}

}  // namespace

const EngineProfile kEngramlabProfile = {
    .id = EngineId::kEngramlab,
    .name = "engramlab",
    .source = "docs/design.md sections 2-3 (seeds 000 and 001)",
    .cpu_offload_default = false,
    .cpu_offload_default_source = "engramlab: off",
    .device_tp_split = TpSplit::kRows,
    .host_tp_split = TpSplit::kHeads,
    .scale_byte_rule = ScaleByteRule::kVllm,
    .settings = {.dp_shared_memory = true, .peer_shards = true},
    .host_layouts = kLayouts,
    .node_local_groups = groups,
    .validate = validate,
    .placement_of = placement_of,
};

}  // namespace engram
