// CPU references the GPU gather kernels are checked against, written value by
// value the way a kernel thread computes them (core/model/row_format.h's
// dequantize_fp8_e4m3_to_bf16 under the table's scale_byte_rule, then -0 -> +0). Independent of the core
// lookups' row loops, so each checks the other.
//
// Layouts: row_ids [token][head] int64; out [token][head][dim] bf16.
// An id in [0, row_count) reads its row; DEAD, other negative and
// past-the-table ids give a zero row (core/lookup/lookup_types.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/lookup/shard_layout.h"
#include "core/model/table_spec.h"

namespace engram::kernels {

// One row as a kernel writes it: `row` (table.row_bytes() bytes) dequantised
// into `out` (table.dim bf16), -0 written as +0, a NaN as 0x7fc0 carrying its FP8
// byte's sign (core/model/row_format.h).
void row_reference(const TableSpec& table, std::span<const std::byte> row, std::span<uint16_t> out);

// The lookup of `row_ids` over a table filled with `fill_seed`
// (core/model/table_fill.h), each row filled on its own and dequantised by
// row_reference: what every placement must return for such a table. Holds
// no table, so any size works (the V4.1 tables too). out: row_ids.size() x
// table.dim.
void filled_lookup_reference(const TableSpec& table, uint64_t fill_seed, std::span<const int64_t> row_ids,
                             std::span<uint16_t> out);

// device_peer's kernel: every shard readable; owner by binary search over the
// shard starts (RowShardLayout::owner_of). shards_by_owner[s] holds
// layout.shard_rows(s) rows.
void gather_peer_reference(const TableSpec& table, const RowShardLayout& layout,
                           std::span<const std::span<const std::byte>> shards_by_owner,
                           std::span<const int64_t> row_ids, std::span<uint16_t> out);

// device_collective's kernel: `out` ([group x slot] tokens) is zero-filled,
// then only the rows shard `shard` owns are written.
void gather_owned_reference(const TableSpec& table, const RowShardLayout& layout, int shard,
                            std::span<const std::byte> shard_bytes, std::span<const int64_t> row_ids,
                            std::span<uint16_t> out);

}  // namespace engram::kernels
