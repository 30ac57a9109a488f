// sglang_numa_shared: SGLang's `numa_shared` host layout (PR 40106): one
// memfd copy of every table per NUMA node of the GPUs of a node, each bound
// to its node and opened by that node's ranks through /proc/<pid>/fd (one
// PID namespace), so no GPU reads its rows across the socket link. Host
// memory: the tables x the NUMA nodes that hold ranks' GPUs. The node's
// lowest rank writes its copy; every rank looks up its own tokens on the CPU
// with no collective. A GPU whose NUMA node the machine does not give
// counts as node 0, with a warning (SGLang refuses an unresolved node).
// Chosen by config.placement only.
#pragma once

#include <string>

#include "core/placements/placement.h"

namespace engram {

namespace sglang_numa_shared_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string doctor_verdict(const DoctorFacts& facts);
Status lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                               std::span<const std::byte> whole_table_bytes);
}  // namespace sglang_numa_shared_ops
inline constexpr PlacementOps kSglangNumaSharedOps{
    .id = Placement::kSglangNumaShared, .name = "sglang_numa_shared", .group = PlacementGroup::kNodeLocalGroup,
    .needs_one_pid_namespace = true, .cost = sglang_numa_shared_ops::cost,
    .host_memory_fix = "sglang_numa_shared keeps a copy per NUMA node: set config.placement: sglang_shared for one "
                       "copy per node, or give hosts with more RAM",
    .build = sglang_numa_shared_ops::build, .ask_plan_for = sglang_numa_shared_ops::ask_plan_for,
    .doctor_verdict = sglang_numa_shared_ops::doctor_verdict, .doctor_position = 8, .step_time = sglang_numa_shared_ops::step_time,
    .lookup_from_whole_table = sglang_numa_shared_ops::lookup_from_whole_table};

}  // namespace engram
