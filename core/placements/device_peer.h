// device_peer (DESIGN.md section 2): the same row shards as
// device_collective, in exportable VMM memory shared through the handle
// exchange, so every rank reads every peer's shard directly (the peer
// mapping gives one span per owner). No collective: each rank looks up only
// its own tokens; owner by binary search over the shard starts. Costs
// table/shard-group HBM per GPU and no buffer; the group agrees a handle type
// (FABRIC or POSIX fds) before anyone allocates.
#pragma once

#include <cstddef>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/lookup/shard_layout.h"
#include "core/placements/placement.h"

namespace engram {

const PlacementOps& device_peer_ops();

}  // namespace engram
