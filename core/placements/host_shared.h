// host_shared (DESIGN.md section 2): one copy of the table per node in host
// shared memory (/dev/shm), created and filled by the host's lowest rank and
// mapped read-only by every co-located DP replica. No collective per step:
// each replica looks up only its own tokens. Costs one table set per node.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/placements/placement.h"

namespace engram {

const PlacementOps& host_shared_ops();

// The node's segment of one table: engramlab-<job_id>-layer<layer_id>.
std::string host_table_segment_name(const std::string& job_id, int layer_id);

// node_table_bytes: the whole table (row_count rows), e.g. a /dev/shm
// mapping. `group` (the node-local group) names this rank in errors.
Status lookup_host_shared(Collectives& group, const LookupRequest& request,
                          std::span<const std::byte> node_table_bytes);

}  // namespace engram
