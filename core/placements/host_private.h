// host_private (DESIGN.md section 2): every replica holds its own copy of
// the table in private host memory, each TP rank its TP slice
// (core/lookup/tp_heads.h): one table per replica, the footprint sharing
// exists to avoid. No DP collective; the TP group assembles the heads.
#pragma once

#include <cstddef>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/placements/placement.h"

namespace engram {

const PlacementOps& host_private_ops();

// private_slice_bytes: this TP rank's slice of its replica's copy (the
// whole table at TP1). Collective over tp_group above TP1.
Status lookup_host_private(Collectives& tp_group, const LookupRequest& request,
                           std::span<const std::byte> private_slice_bytes);

}  // namespace engram
