// host_shared (DESIGN.md section 2): one copy of the table per node in host
// shared memory, mapped by every co-located DP replica. No collective: each
// replica looks up only its own tokens.
#pragma once

#include <cstddef>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"

namespace engram {

// node_table_bytes: the whole table (row_count rows), e.g. a /dev/shm
// mapping. `group` (the node-local group) names this rank in errors.
Status lookup_host_shared(Collectives& group, const LookupRequest& request,
                          std::span<const std::byte> node_table_bytes);

}  // namespace engram
