// sglang_shared: SGLang's `shared` host layout (python/sglang/srt/layers/
// engram.py, _HostTable): one copy of every table in a memfd the node's
// lowest rank creates; the others open it through /proc/<pid>/fd/<n>, which
// needs them on that node in one PID namespace. SGLang makes one such memfd
// for its TP group, every rank of the job, so under the SGLang profile a job
// on more than one node is refused (sglang_profile.cc, check_at_creation);
// another engine asking for it by name gets one copy per node. Every rank holds every
// row, so a rank looks up its own tokens with no collective (no all-reduce,
// no TP assembly). Differs from host_shared in where the copy lives (a memfd,
// not /dev/shm: no tmpfs size applies, nothing named survives a crash) and in
// holding whole tables, not TP slices. Chosen by config.placement only.
#pragma once

#include <string>

#include "core/placements/placement.h"

namespace engram {

namespace sglang_shared_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string doctor_verdict(const DoctorFacts& facts);
Status lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                               std::span<const std::byte> whole_table_bytes);
}  // namespace sglang_shared_ops
inline constexpr PlacementOps kSglangSharedOps{
    .id = Placement::kSglangShared, .name = "sglang_shared", .group = PlacementGroup::kNodeLocalGroup,
    .needs_one_pid_namespace = true, .cost = sglang_shared_ops::cost,
    .host_memory_fix = "sglang_shared already keeps one copy on the node: give hosts with more RAM",
    .build = sglang_shared_ops::build, .ask_plan_for = sglang_shared_ops::ask_plan_for,
    .doctor_verdict = sglang_shared_ops::doctor_verdict, .doctor_position = 6, .step_time = sglang_shared_ops::step_time,
    .lookup_from_whole_table = sglang_shared_ops::lookup_from_whole_table};

}  // namespace engram
