// device_collective (docs/design.md section 2): the table is row-sharded over the
// shard group (rank r owns layout shard r) in this rank's own VMM memory.
// Per step: all-gather every rank's ids (each padded to the DP slot with
// DEAD), gather the rows this rank owns for all of them into a zero-filled
// [group x slot] buffer, reduce-scatter (sum) back, keep this rank's own
// tokens. Costs table/shard-group HBM per GPU plus that buffer.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/lookup/shard_layout.h"
#include "core/placements/placement.h"

namespace engram {

// Its registration (placement_registry.cc); the hooks are in device_collective.cc.
namespace device_collective_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Status capable(const RankBackend& backend);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
std::string doctor_verdict(const DoctorFacts& facts);
}  // namespace device_collective_ops
inline constexpr PlacementOps kDeviceCollectiveOps{
    .id = Placement::kDeviceCollective, .name = "device_collective", .needs_device = true,
    .group = PlacementGroup::kShardGroup, .rows_back_collective = "reduce-scatter rows (sum)",
    .collective_lookup = true, .sums_members_rows = true, .needs_a_gpu_per_rank = true,
    .cost = device_collective_ops::cost,
    .capable = device_collective_ops::capable, .build = device_collective_ops::build,
    .steps = kMapsDeviceMemory, .doctor_verdict = device_collective_ops::doctor_verdict, .doctor_position = 1,
    .bench_reference = BenchReference::kNcclPath, .step_time = device_collective_ops::step_time};

// [group x tokens_per_rank_max x heads x dim] bf16, one buffer reused by every
// layer (layers run one after another), sized for the widest table.
uint64_t collective_buffer_bytes(const ModelSpec& spec, int group_size, int tokens_per_rank_max);

}  // namespace engram
