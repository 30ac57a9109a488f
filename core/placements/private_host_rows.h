// What host_private and host_head_sharded share: each rank holds, per
// table, one contiguous range of rows in its own host memory (the whole
// table, or its heads' buckets), filled with the table's bytes, and looks up
// over it with its placement's lookup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/lookup/tp_heads.h"
#include "core/placements/placement.h"

namespace engram {

// The rows this rank holds of `table` (`group`: the placement's group;
// `tp_group`: its replica's TP ranks).
using RowsHeld = RowRange (*)(const TableSpec& table, const Collectives& group, const Collectives& tp_group);
// The placement's lookup over the rows held.
using LookupHeld = Status (*)(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                              std::span<const std::byte> rows);

// Fills every table's rows; no collective.
std::unique_ptr<PlacementTables> build_private_host_rows(Collectives& group, Collectives& tp_group,
                                                         const ModelSpec& model, uint64_t fill_seed,
                                                         RowsHeld rows_held, LookupHeld lookup_held);

}  // namespace engram
