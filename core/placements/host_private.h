// host_private (DESIGN.md section 2): every rank holds its own whole copy of
// the table in private host memory (the footprint sharing exists to avoid:
// one table set per rank). No collective; each rank looks up its own tokens.
#pragma once

#include <cstddef>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/placements/placement.h"

namespace engram {

const PlacementOps& host_private_ops();

// private_table_bytes: this rank's whole copy (row_count rows). `group` names
// this rank in errors.
Status lookup_host_private(Collectives& group, const LookupRequest& request,
                           std::span<const std::byte> private_table_bytes);

}  // namespace engram
