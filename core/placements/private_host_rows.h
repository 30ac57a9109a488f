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
#include "core/placements/placement.h"

namespace engram {

struct RowRange {
  int64_t first_row = 0;
  int64_t row_count = 0;
};

// The rows this rank of `group` holds of `table`.
using RowsHeld = RowRange (*)(const TableSpec& table, const Collectives& group);
// The placement's lookup over the rows held.
using LookupHeld = Status (*)(Collectives& group, const LookupRequest& request, std::span<const std::byte> rows);

// Fills every table's rows; no collective.
std::unique_ptr<PlacementTables> build_private_host_rows(Collectives& group, const ModelSpec& model,
                                                         uint64_t fill_seed, RowsHeld rows_held,
                                                         LookupHeld lookup_held);

}  // namespace engram
