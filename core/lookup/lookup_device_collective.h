// device_collective (DESIGN.md section 2): the table is row-sharded over the
// group (rank r owns layout shard r). All-gather every rank's ids (each padded
// to the DP slot with DEAD), gather the rows this rank owns for all of them
// into a zero-filled [group x slot] buffer, reduce-scatter (sum) back, keep
// this rank's own tokens.
#pragma once

#include <cstddef>
#include <span>

#include "core/backend/collectives.h"
#include "core/lookup/lookup_types.h"
#include "core/lookup/shard_layout.h"

namespace engram {

// own_shard_bytes: layout.shard_rows(group.rank()) rows. A malformed request
// returns at once; a slot overrun still takes part with DEAD ids (so peers
// finish) and then returns its error, leaving `output` unwritten. After a
// collective error the contents of `output` are unspecified.
Status lookup_device_collective(Collectives& group, const LookupRequest& request, const RowShardLayout& layout,
                                std::span<const std::byte> own_shard_bytes);

}  // namespace engram
