// device_collective (DESIGN.md section 2): the table is row-sharded over the
// shard group (rank r owns layout shard r) in this rank's own VMM memory.
// Per step: all-gather every rank's ids (each padded to the DP slot with
// DEAD), gather the rows this rank owns for all of them into a zero-filled
// [group x slot] buffer, reduce-scatter (sum) back, keep this rank's own
// tokens. Costs table/shard-group HBM per GPU plus that buffer.
#pragma once

#include <cstddef>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/lookup/shard_layout.h"
#include "core/placements/placement.h"

namespace engram {

const PlacementOps& device_collective_ops();

// [group x tokens_per_rank_max x heads x dim] bf16, one buffer reused by every
// layer (layers run one after another), sized for the widest table.
uint64_t collective_buffer_bytes(const ModelSpec& spec, int group_size, int tokens_per_rank_max);

}  // namespace engram
