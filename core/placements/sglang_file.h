// sglang_file: SGLang's `file` host layout: the table in a file every rank
// of a node maps MAP_SHARED (MADV_RANDOM), unpinned: its pages are the page
// cache, one copy per node, reclaimable, never registered with the device;
// rows are looked up on the CPU with no collective. The node's lowest rank
// writes the file; its name goes once every rank has mapped it. Chosen by
// config.placement only.
#pragma once

#include <string>

#include "core/placements/placement.h"

namespace engram {

namespace sglang_file_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string doctor_verdict(const DoctorFacts& facts);
Status lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                               std::span<const std::byte> whole_table_bytes);
}  // namespace sglang_file_ops
inline constexpr PlacementOps kSglangFileOps{
    .id = Placement::kSglangFile, .name = "sglang_file", .group = PlacementGroup::kNodeLocalGroup,
    .cost = sglang_file_ops::cost,
    .host_memory_fix = "sglang_file keeps one copy per node in the page cache: give hosts with more RAM (or accept "
                       "reads from disk where the page cache cannot hold it)",
    .build = sglang_file_ops::build, .ask_plan_for = sglang_file_ops::ask_plan_for,
    .doctor_verdict = sglang_file_ops::doctor_verdict, .doctor_position = 9, .step_time = sglang_file_ops::step_time,
    .lookup_from_whole_table = sglang_file_ops::lookup_from_whole_table};

}  // namespace engram
