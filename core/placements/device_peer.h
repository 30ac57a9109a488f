// device_peer (docs/design.md section 2): the same row shards as
// device_collective, in exportable VMM memory shared through the handle
// exchange, so every rank reads every peer's shard directly (the peer
// mapping gives one span per owner). No collective: each rank looks up only
// its own tokens; owner by binary search over the shard starts. Costs
// table/shard-group HBM per GPU and no buffer; the group agrees a handle type
// (FABRIC or POSIX fds) before anyone allocates.
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

// Its registration (placement_registry.cc); the hooks are in device_peer.cc.
namespace device_peer_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Status capable(const RankBackend& backend);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string doctor_verdict(const DoctorFacts& facts);
}  // namespace device_peer_ops
inline constexpr PlacementOps kDevicePeerOps{
    .id = Placement::kDevicePeer, .name = "device_peer", .needs_device = true,
    .group = PlacementGroup::kShardGroup, .shares_device_memory = true, .cost = device_peer_ops::cost,
    .capable = device_peer_ops::capable, .build = device_peer_ops::build, .ask_plan_for = device_peer_ops::ask_plan_for,
    .steps = kExportsDeviceMemory | kMapsDeviceMemory, .doctor_verdict = device_peer_ops::doctor_verdict,
    .doctor_position = 0, .has_collective_cross_check = true, .bench_reference = BenchReference::kPeerKernel, .step_time = device_peer_ops::step_time};

}  // namespace engram
