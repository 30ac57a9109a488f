// host_head_sharded (DESIGN.md section 2): each DP rank of a node holds the
// rows of its heads in private host memory (core/lookup/shard_layout.h
// head_shard: ceil-sized shards, so an uneven head count leaves the last
// shard short or empty): one table set per node-local group. Per step:
// all-gather ids over the node-local group (each padded to the DP slot with
// DEAD), look up this rank's heads for every token, trade rows back with
// all_to_all. An in-table id of another head's bucket (never made by
// hashing) is served by the rank holding that row in a second all_to_all,
// run only when the gathered ids hold such an id, so every placement returns
// the same bytes.
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

// The rows rank `shard` of `group_size` holds: its heads' buckets, contiguous.
using HeadShardRows = RowRange;
HeadShardRows head_shard_rows(const TableSpec& table, int group_size, int shard);
// Host bytes of the heads member `index` of a `group_size` group holds, all tables.
uint64_t head_shard_host_bytes(const ModelSpec& spec, int group_size, int index);

// own_head_shard_bytes: the rows head_shard_rows(table, group.size(),
// group.rank()) names. A malformed request returns at once; a slot overrun
// still serves its heads to its peers and then returns its error, leaving
// `output` unwritten. After a collective error the contents of `output` are
// unspecified.
Status lookup_host_head_sharded(Collectives& group, const LookupRequest& request,
                                std::span<const std::byte> own_head_shard_bytes);

}  // namespace engram
