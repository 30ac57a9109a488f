// device_peer (DESIGN.md section 2): the same row shards as
// device_collective, in exportable VMM memory shared through the handle
// exchange, so every rank reads every peer's shard directly (the peer
// mapping gives one span per owner). No collective: each rank looks up only
// its own tokens; owner by binary search over the shard starts. Costs
// table/shard-group HBM per GPU and no buffer; the group agrees a handle type
// (FABRIC or POSIX fds) before anyone allocates.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/lookup/shard_layout.h"
#include "core/placements/placement.h"

namespace engram {

const PlacementOps& device_peer_ops();

// shards_by_owner[s]: layout.shard_rows(s) rows, as mapped from shard s's
// owner. `group` names this rank in errors; no collective is called.
Status lookup_device_peer(Collectives& group, const LookupRequest& request, const RowShardLayout& layout,
                          std::span<const std::span<const std::byte>> shards_by_owner);

// The same lookup where the shards are reachable only through the device's
// peer mappings: each in-table row is read by `read_row` (the row rule is
// lookup_rows_by_reader's), so no rank keeps a host copy of the peers'
// shards. read_row's errors are returned with this rank and step "lookup".
using PeerRowRead = std::function<Status(int64_t row, std::span<std::byte> row_bytes)>;
Status lookup_device_peer_by_row(Collectives& group, const LookupRequest& request, const PeerRowRead& read_row);

}  // namespace engram
