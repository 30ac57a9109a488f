// The per-token row reads every placement is built from: given row ids
// [token][head] and wherever the rows live, write [token][head][dim] bf16 by
// the lookup rule (core/model/row_format.h; ids outside the table give zero rows,
// core/lookup/lookup_types.h). Pure functions over byte spans: host backends
// pass /dev/shm mappings, the emulator its own buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/lookup/shard_layout.h"
#include "core/model/table_spec.h"

namespace engram {

// Every row readable in one span (host_shared, host_private, the direct
// reference). table_bytes holds row_count rows.
void lookup_rows_whole_table(const TableSpec& table, std::span<const std::byte> table_bytes,
                             std::span<const int64_t> row_ids, std::span<uint16_t> out);

// Only the rows [first_row, first_row + row_count) that `range_bytes` holds,
// at every head position (a host placement's TP slice): `out` is zero-filled
// first, then rows in the range are written; every other row stays zero.
// out is [token][heads][dim].
void lookup_rows_in_range(const TableSpec& table, int64_t first_row, int64_t row_count,
                          std::span<const std::byte> range_bytes, std::span<const int64_t> row_ids,
                          std::span<uint16_t> out);

// Head positions [heads.begin, heads.end) of every token (host_head_sharded).
// shard_bytes holds rows [shard_first_row, shard_first_row + shard_row_count)
// (this rank's heads' buckets). An id outside the table gives a zero row; an
// in-table id outside this shard also gives zero here and is served by the
// shard that holds it (lookup_host_head_sharded). row_ids are
// [token][all heads]; out is [token][heads.size()][dim].
void lookup_rows_head_shard(const TableSpec& table, HeadRange heads, int64_t shard_first_row,
                            std::span<const std::byte> shard_bytes, std::span<const int64_t> row_ids,
                            std::span<uint16_t> out);

}  // namespace engram
