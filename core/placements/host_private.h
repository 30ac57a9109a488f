// host_private (docs/design.md section 2): every replica holds its own copy of
// the table in private host memory, each TP rank its TP slice
// (core/lookup/tp_heads.h): one table per replica, the footprint sharing
// exists to avoid. No DP collective; the TP group assembles the heads.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/placements/placement.h"

namespace engram {

// Its registration (placement_registry.cc); the hooks are in host_private.cc.
namespace host_private_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string doctor_verdict(const DoctorFacts& facts);
Status lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                               std::span<const std::byte> whole_table_bytes);
}  // namespace host_private_ops
inline constexpr PlacementOps kHostPrivateOps{
    .id = Placement::kHostPrivate, .name = "host_private", .group = PlacementGroup::kNodeLocalGroup,
    .cost = host_private_ops::cost,
    .host_memory_fix = "host_private keeps one table per replica (each TP rank its slice): with dp > 1 and the replicas "
                       "co-located, leave dp_shared_memory unset (or true) for host_shared, one copy per node",
    .build = host_private_ops::build, .ask_plan_for = host_private_ops::ask_plan_for,
    .report_heads = report_tp_slice_heads, .doctor_verdict = host_private_ops::doctor_verdict, .doctor_position = 4, .step_time = host_private_ops::step_time,
    .lookup_from_whole_table = host_private_ops::lookup_from_whole_table};

// private_slice_bytes: this TP rank's slice of its replica's copy (the
// whole table at TP1). Collective over tp_group above TP1.
Status lookup_host_private(Collectives& tp_group, const LookupRequest& request,
                           std::span<const std::byte> private_slice_bytes);

}  // namespace engram
