// Context-parallel prefill groups (layout.prefill_cp): which ranks hash and
// look up one sequence's prefill together, each rank its own shard.
//
// As SGLang forms its attention CP group (parallel_state.py: group ranks
// dp_idx * attn_tp * attn_cp + cp_idx * attn_tp + attn_tp_idx), a CP group
// here is prefill_cp consecutive DP replicas, one rank of each at the same
// TP rank: world rank (g * prefill_cp + c) * tp + t is CP rank c of the
// group of replica block g and TP rank t. A replica is then one CP rank's
// attention group (SGLang's attn_tp ranks), so prefill_cp must divide dp.
// At prefill_cp 1 every rank is a group of its own.
#pragma once

#include <vector>

#include "core/base/status.h"
#include "core/deployment/deployment.h"

namespace engram {

struct CpGroup {
  int index = 0;                 // which group (a color for Collectives::split)
  int cp_rank = 0;               // this rank's place in it: its shard's order in the sequence
  std::vector<int> world_ranks;  // the members, by CP rank
};

// prefill_cp >= 1 and a divisor of dp: invalid_argument naming the field,
// the values and the fix.
Status check_prefill_cp(const ParallelLayout& layout);

int cp_group_count(const ParallelLayout& layout);
// The layout must pass check_prefill_cp; world_rank in [0, world_size).
CpGroup cp_group_of(const ParallelLayout& layout, int world_rank);

}  // namespace engram
