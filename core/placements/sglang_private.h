// sglang_private: SGLang's `private` host layout (python/sglang/srt/layers/
// engram.py, _HostTable and EngramEmbedding): each rank holds, in its own
// anonymous host memory, the rows [N*r/g, N*(r+1)/g) of its group (SGLang's
// TP group, here the row-shard group: config shard_group), and the lookup
// gathers the rows it owns for every member's ids, zeroes the others and
// sums them back (SGLang's all-reduce; dp_gather + reduce-scatter under DP
// attention): device_collective's rows and collective, in host memory.
// It differs from host_private, which keeps one copy per replica with a TP
// slice of the heads per rank and no DP collective. Looked up on the CPU
// here (no device registration). Chosen by config.placement only.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/placements/placement.h"

namespace engram {

namespace sglang_private_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string doctor_verdict(const DoctorFacts& facts);
Status lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                               std::span<const std::byte> whole_table_bytes);
}  // namespace sglang_private_ops
// The group and how rows come back are SGLang's rules, kept with their
// sources in core/engines/sglang_profile.cc: rule_key::kHostTpSplit
// (per_rank: a row shard per rank, summed back; sgl-project/sglang
// python/sglang/srt/layers/engram/host_table.py, stored reading, no commit)
// and rule_key::kRowsBack (zero-fill and all-reduce, a reduce-scatter under
// DP attention; sgl-project/sglang python/sglang/srt/layers/engram.py, PR
// 39666, merged). Reports and the step model read them from these fields.
inline constexpr PlacementOps kSglangPrivateOps{
    .id = Placement::kSglangPrivate, .name = "sglang_private", .group = PlacementGroup::kShardGroup,
    .rows_back_collective = "reduce-scatter rows (sum)", .collective_lookup = true, .sums_members_rows = true,
    .cost = sglang_private_ops::cost,
    .host_memory_fix = "sglang_private already splits one table over the row-shard group: widen the group "
                       "(config.shard_group: world) or give hosts with more RAM",
    .build = sglang_private_ops::build, .ask_plan_for = sglang_private_ops::ask_plan_for,
    .doctor_verdict = sglang_private_ops::doctor_verdict, .doctor_position = 7, .step_time = sglang_private_ops::step_time,
    .lookup_from_whole_table = sglang_private_ops::lookup_from_whole_table};

// shard_bytes: this member's rows of the table, RowShardLayout(rows,
// group.size()).shard_begin(group.rank()) on. Collective over `group`
// (every member calls it, also with a malformed request, as long as it has
// a table and a slot).
Status lookup_sglang_private(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                             std::span<const std::byte> shard_bytes);

}  // namespace engram
