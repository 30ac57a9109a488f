// What the two device placements share: the table cut into contiguous row
// shards over the shard group (core/lookup/shard_layout.h RowShardLayout),
// each rank's shard in VMM memory rounded up to the granularity.
#pragma once

#include <cstdint>

#include "core/model/table_spec.h"

namespace engram {

// Sum over tables of round_up(max_shard_rows * row_bytes, granularity): the
// HBM one rank's shards take (every rank allocates the largest shard's size,
// so shards line up; docs/design.md: table/tp HBM per GPU, granularity-rounded).
uint64_t device_shard_hbm_bytes(const ModelSpec& spec, int shard_count, uint64_t granularity_bytes);

}  // namespace engram
