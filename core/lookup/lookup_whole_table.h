// The lookup over a whole table one span holds: host_shared (the node's
// /dev/shm copy) and host_private (this rank's own copy) are the same lookup
// over different memory. No collective: each rank looks up its own tokens.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"

namespace engram {

// table_bytes: the whole table (row_count rows). `group` names this rank in
// errors; `what` names the copy in them ("host_shared: the shared table").
Status lookup_whole_table(Collectives& group, const LookupRequest& request, std::span<const std::byte> table_bytes,
                          std::string_view what);

// The same where every TP rank of a replica holds the whole table (SGLang's
// host layouts): no collective; under sequence parallelism
// (request.sequence_parallel_shards == tp) this TP rank writes its own token
// shard, zero-padded, as the TP assembly would.
Status lookup_whole_table_on_tp_rank(Collectives& tp_group, const LookupRequest& request,
                                     std::span<const std::byte> table_bytes, std::string_view what);

}  // namespace engram
