// SGLang's rules (docs/design.md section 9), read from its tree:
// - device tables split over TP by rows, zero-fill and all-reduce; with DP
//   attention ids all-gathered over DP and rows reduce-scattered back
//   (seed 000): device_collective, device_peer where peer_shards asks;
// - cpu_offload off unless a host-table layout is asked for;
// - host layouts shared (a memfd TP rank 0 makes, peers open
//   /proc/<pid>/fd/<n>), private, auto, numa_shared (one copy per GPU NUMA
//   node, PR 40106) and file (MAP_SHARED, MADV_RANDOM, unpinned)
//   (python/sglang/srt/layers/engram/host_table.py); their placements are
//   built by their own files and asked for here by name;
// - no node-local Engram DP group: a rank shares nothing with other
//   replicas beyond what its host layout maps, so each rank is its own group;
// - scale bytes as torch float8_e8m0fnu: 0 -> 2^-127, 255 -> NaN (its
//   Triton engram_gather `_E8M0_ZERO = 2.0**-127`; its test asserts 2**-127).
#include <fmt/format.h>

#include "core/engines/engine_profiles.h"

namespace engram {
namespace {

constexpr HostLayoutOption kLayouts[] = {
    {"auto", "sglang_shared", "shared where the node's ranks can open one memfd, else private"},
    {"shared", "sglang_shared", "one memfd per node made by TP rank 0, opened through /proc/<pid>/fd"},
    {"private", "sglang_private", "row shards over the TP group in host memory, summed back by a collective"},
    {"numa_shared", "sglang_numa_shared", "one copy per NUMA node of the GPUs, bound before first touch"},
    {"file", "sglang_file", "a table file mapped MAP_SHARED, unpinned, looked up on the CPU"},
};

NodeLocalGroups groups(const Deployment& d) {
  const int world = d.layout.world_size();
  NodeLocalGroups out;
  out.host_misaligned.assign(d.hosts.size(), false);
  out.group_by_rank.resize(static_cast<size_t>(world));
  out.size_by_rank.assign(static_cast<size_t>(world), 1);
  out.index_by_rank.assign(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) out.group_by_rank[static_cast<size_t>(r)] = r;
  out.group_count = world;
  return out;
}

// Rows split over TP: any tp works; what it refuses is the settings it lacks.
Status validate(const Deployment&, const ModelSpec&) { return Status::ok(); }

Result<Placement> placement_of(const Deployment& d, Placement decided) {
  if (is_device_placement(decided)) return decided;
  ENGRAM_ASSIGN_OR_RETURN(const HostLayoutOption* layout, host_layout_of(kSglangProfile, d.config));
  return placement_named(kSglangProfile, layout->placement, fmt::format("host layout '{}'", layout->name));
}

}  // namespace

const EngineProfile kSglangProfile = {
    .id = EngineId::kSglang,
    .name = "sglang",
    .source = "python/sglang/srt/layers/engram/ (engram_gather, host_table.py)",
    .cpu_offload_default = false,
    .cpu_offload_default_source = "SGLang: off unless a host layout is asked for",
    .device_tp_split = TpSplit::kRows,
    .host_tp_split = TpSplit::kHeads,
    .scale_byte_rule = ScaleByteRule::kSglang,
    .settings = {.peer_shards = true},
    .host_layouts = kLayouts,
    .node_local_groups = groups,
    .validate = validate,
    .placement_of = placement_of,
};

}  // namespace engram
