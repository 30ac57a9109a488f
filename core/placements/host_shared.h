// host_shared (docs/design.md section 2): one copy of the table per node in host
// shared memory (/dev/shm), one file per TP slice (core/lookup/tp_heads.h),
// created and filled by the host's lowest rank; each rank maps its TP
// slice read-only, shared by the co-located DP replicas. No DP collective
// per step: each replica looks up only its own tokens; the TP group
// assembles the heads. Costs one table set per node.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/placements/placement.h"

namespace engram {

// Its registration (placement_registry.cc); the hooks are in host_shared.cc.
namespace host_shared_ops {
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string doctor_verdict(const DoctorFacts& facts);
}  // namespace host_shared_ops
inline constexpr PlacementOps kHostSharedOps{
    .id = Placement::kHostShared, .name = "host_shared", .group = PlacementGroup::kNodeLocalGroup,
    .cost = host_shared_ops::cost,
    .host_memory_fix = "host_shared already keeps one copy per node: give hosts with more RAM",
    .build = host_shared_ops::build, .ask_plan_for = host_shared_ops::ask_plan_for,
    .steps = kCreatesHostSegments, .report_heads = report_tp_slice_heads,
    .doctor_verdict = host_shared_ops::doctor_verdict, .doctor_position = 2, .bench_pinned_copy_share_min = 0.6};

// The node's segment of one table: engramlab-<job_id>-layer<layer_id>.
std::string host_table_segment_name(const std::string& job_id, int layer_id);
// Of one TP slice of it: that name, then -tp<tp_rank> above TP1.
std::string host_table_slice_segment_name(const std::string& job_id, int layer_id, int tp_size, int tp_rank);

// node_slice_bytes: this TP rank's slice of the node's table (the whole
// table at TP1), e.g. a /dev/shm mapping. Collective over tp_group above TP1.
Status lookup_host_shared(Collectives& tp_group, const LookupRequest& request,
                          std::span<const std::byte> node_slice_bytes);

}  // namespace engram
