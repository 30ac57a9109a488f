// host_head_sharded (docs/design.md section 2): the heads are cut into TP x
// Engram DP shards, TP-major (core/lookup/tp_heads.h): the member with index
// i of TP rank t's Engram DP group (the node-local replicas' ranks of TP
// rank t) holds shard t * g + i in private host memory, ceil-sized, so an
// uneven head count leaves the last shards short or empty: one table per
// node-local set of replicas. Per step: all-gather ids over the Engram DP
// group (each padded to the DP slot with DEAD), look up this rank's heads
// for every token, trade rows back with all_to_all; then the TP group
// assembles the heads (core/lookup/tp_assembly.h). An in-table id of
// another head's bucket (never made by hashing) is served by the rank
// holding that row in a second all_to_all (and, across TP blocks, the TP
// step's second all-gather), run only when the ids hold such an id, so
// every placement returns the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/placements/placement.h"
#include "core/placements/private_host_rows.h"

namespace engram {

// Its registration (placement_registry.cc); the hooks are in host_head_sharded.cc.
namespace host_head_sharded_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string report_heads(int heads, int tp, int group_size);
std::string doctor_verdict(const DoctorFacts& facts);
Status lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                               std::span<const std::byte> whole_table_bytes);
}  // namespace host_head_sharded_ops
inline constexpr PlacementOps kHostHeadShardedOps{
    .id = Placement::kHostHeadSharded, .name = "host_head_sharded", .group = PlacementGroup::kNodeLocalGroup,
    .collective_lookup = true, .cost = host_head_sharded_ops::cost,
    .host_memory_fix = "host_head_sharded keeps one table per node-local set of replicas: co-locate more replicas "
                       "per node so the groups are larger",
    .build = host_head_sharded_ops::build, .ask_plan_for = host_head_sharded_ops::ask_plan_for,
    .report_heads = host_head_sharded_ops::report_heads, .doctor_verdict = host_head_sharded_ops::doctor_verdict,
    .doctor_position = 3, .step_time = host_head_sharded_ops::step_time,
    .lookup_from_whole_table = host_head_sharded_ops::lookup_from_whole_table};

// The rows shard `shard` of `shard_count` holds: its heads' buckets,
// contiguous (shard_count = tp * g, shard = engram_head_shard_rank(...)).
using HeadShardRows = RowRange;
HeadShardRows head_shard_rows(const TableSpec& table, int shard_count, int shard);
// Host bytes of shard `index` of `shard_count`, all tables.
uint64_t head_shard_host_bytes(const ModelSpec& spec, int shard_count, int index);

// group: this rank's Engram DP group; tp_group: its replica's TP ranks.
// own_head_shard_bytes: the rows of engram_head_shard(heads, tp_group.size(),
// tp_group.rank(), group.size(), group.rank()). A malformed request takes
// part only in the TP step's header exchange; a slot overrun still serves
// its heads to its peers and then returns its error, leaving `output`
// unwritten. After a collective error the contents of `output` are
// unspecified.
Status lookup_host_head_sharded(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                std::span<const std::byte> own_head_shard_bytes);

}  // namespace engram
