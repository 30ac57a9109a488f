// host_head_sharded (DESIGN.md section 2): the heads are cut into TP x
// Engram DP shards, TP-major (core/lookup/tp_heads.h): the member with index
// i of TP rank t's Engram DP group (the node-local replicas' ranks of TP
// rank t) holds shard t * g + i in private host memory, ceil-sized, so an
// uneven head count leaves the last shards short or empty: one table per
// node-local set of replicas. Per step: all-gather ids over the Engram DP
// group (each padded to the DP slot with DEAD), look up this rank's heads
// for every token, trade rows back with all_to_all; then the TP group
// assembles the heads (core/lookup/tp_assembly.h). An in-table id of
// another head's bucket (never made by hashing) is served by the rank
// holding that row in a second all_to_all (and, across TP blocks, the TP
// step's second all-gather), run only when the ids hold such an id, so
// every placement returns the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/placements/placement.h"
#include "core/placements/private_host_rows.h"

namespace engram {

const PlacementOps& host_head_sharded_ops();

// The rows shard `shard` of `shard_count` holds: its heads' buckets,
// contiguous (shard_count = tp * g, shard = engram_head_shard_rank(...)).
using HeadShardRows = RowRange;
HeadShardRows head_shard_rows(const TableSpec& table, int shard_count, int shard);
// Host bytes of shard `index` of `shard_count`, all tables.
uint64_t head_shard_host_bytes(const ModelSpec& spec, int shard_count, int index);

// group: this rank's Engram DP group; tp_group: its replica's TP ranks.
// own_head_shard_bytes: the rows of engram_head_shard(heads, tp_group.size(),
// tp_group.rank(), group.size(), group.rank()). A malformed request takes
// part only in the TP step's header exchange; a slot overrun still serves
// its heads to its peers and then returns its error, leaving `output`
// unwritten. After a collective error the contents of `output` are
// unspecified.
Status lookup_host_head_sharded(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                std::span<const std::byte> own_head_shard_bytes);

}  // namespace engram
