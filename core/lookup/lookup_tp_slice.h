// The lookup over a TP slice one span holds: host_shared (the node's
// /dev/shm copy of this TP rank's slice) and host_private (this replica's
// TP rank's own slice) are the same lookup over different memory. Each TP
// rank reads the rows its slice holds for the replica's tokens; the TP
// group assembles the heads (core/lookup/tp_assembly.h). At TP1 the slice
// is the whole table and there is no collective.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"

namespace engram {

// slice_bytes: rows_of_heads(table, tp_head_slice(heads, tp_group.size(),
// tp_group.rank())). Collective over tp_group when it has more than one
// member (every member calls it, also with a malformed request). `what`
// names the copy in errors ("host_shared: the shared table").
Status lookup_tp_slice(Collectives& tp_group, const LookupRequest& request, std::span<const std::byte> slice_bytes,
                       std::string_view what);

}  // namespace engram
