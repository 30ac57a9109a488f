// device_head_sharded (docs/design.md section 2): vLLM's device layout
// (ParallelEngramEmbedding without cpu_offload). The heads are cut over the
// shard group in ceil(heads / P)-wide slices (core/lookup/shard_layout.h
// head_shard: the last slices short or empty), and member r holds every row
// of its slice's heads in its own VMM memory, [rows, ceil(H/P) heads] as
// vLLM's [T, ceil(H/P), D]. The group is the shard group: with
// `shard_group: world` that is TP x DP (vLLM's embedding_across_dp; at dp 1
// vLLM's TP split).
//
// Per step: all-gather every member's ids (each padded to the DP slot with
// DEAD, with its header), gather this rank's heads for every member's
// tokens into one chunk per member, all_to_all the chunks (each member gets
// every slice of its own tokens), then one bf16 gather puts the slices into
// [tokens][heads][dim] (the transposition, through a permutation of the
// received rows made at build time). Traffic per rank and step: about
// slot x heads x dim bf16, not group x that as device_collective's
// reduce-scatter.
//
// Sequence parallelism (above TP1; PlacementOps::trades_token_shards): each
// TP rank posts only the ids of its own token shard of its replica's tokens
// ([tp_rank x c, +c), c = ceil(tokens / tp)) in a slot of ceil(slot / tp),
// so the same all-to-all brings it every head of its shard alone, zero past
// the replica's last token: a tp-th of the traffic, and the bytes vLLM's
// Engram.embed gets from its TP all-gather of rows and _engram_select_rows
// (vllm/models/deepseek_v4_1/nvidia/engram.py).
//
// An in-table id of another slice's bucket (never made by hashing) reads
// zero on the device path, which cannot tell without a host step; the host
// lookup finds such ids on the host, agrees with the group whether any rank
// has one, and only then serves them through the collective over the rows
// each member holds (core/lookup/device_lookup.h), so it is bitwise equal to
// the CPU rule for every id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/placements/placement.h"

namespace engram {

// Its registration (placement_registry.cc); the hooks are in device_head_sharded.cc.
namespace device_head_sharded_ops {
StepTime step_time(const StepCostInput& input, const StepConstants& constants);
PlacementCost cost(const ModelSpec& model, const PlacementCostInput& input);
Status capable(const RankBackend& backend);
Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context);
void ask_plan_for(EngramConfig& config);
std::string report_heads(int heads, int tp, int group_size);
std::string doctor_verdict(const DoctorFacts& facts);
}  // namespace device_head_sharded_ops
inline constexpr PlacementOps kDeviceHeadShardedOps{
    .id = Placement::kDeviceHeadSharded, .name = "device_head_sharded", .needs_device = true,
    .group = PlacementGroup::kShardGroup, .group_text = "head slices",
    .rows_back_collective = "all-to-all head slices", .collective_lookup = true, .trades_token_shards = true,
    .needs_a_gpu_per_rank = true,
    .cost = device_head_sharded_ops::cost, .capable = device_head_sharded_ops::capable,
    .build = device_head_sharded_ops::build, .ask_plan_for = device_head_sharded_ops::ask_plan_for,
    .steps = kMapsDeviceMemory, .report_heads = device_head_sharded_ops::report_heads,
    .doctor_verdict = device_head_sharded_ops::doctor_verdict, .doctor_position = 5,
    .bench_reference = BenchReference::kNcclPath, .step_time = device_head_sharded_ops::step_time};

// HBM of member `index`'s head slices over a group of `group_size`, every
// table's slice one allocation rounded up to the granularity.
uint64_t device_head_shard_hbm_bytes(const ModelSpec& spec, int group_size, int index, uint64_t granularity_bytes);
// Its lookup buffers: the ids (own slot, every member's, the headers), the
// chunks sent and received ([group][slot][ceil(heads / group)][dim] bf16
// each) and the permutations that reassemble them (above TP1 also a token
// shard's, for sequence parallelism).
uint64_t device_head_sharded_buffer_bytes(const ModelSpec& spec, int group_size, int tokens_per_rank_max, int tp);

}  // namespace engram
