// Deterministic table contents: the bytes of row r of a layer depend only on
// (seed, layer id, r). Every rank, process and placement that fills any part
// of a table writes identical bytes (docs/design.md section 3: a dummy fill
// is one of the loaders of a shared table).
//
// The rows are not realistic weights: they carry the values the lookup
// semantics must survive (-0, NaN, E4M3 subnormals, the 448 maximum, and for
// FP8 rows a spread of UE8M0 scales including e = 0 and e = 255).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/model/table_spec.h"

namespace engram {

// Fills `rows_bytes` (a whole number of rows) with rows first_row,
// first_row + 1, ... of `table`.
void fill_table_rows(const TableSpec& table, uint64_t seed, int64_t first_row, std::span<std::byte> rows_bytes);

// The same bytes from `threads` threads, each a contiguous part (host
// tables of 100 GB: one thread fills about 2 GB/s, and tmpfs page faults are
// per thread too; populating each part first with MADV_POPULATE_WRITE was
// slower on 16 threads: benchmarks/host_fill_probe). threads <= 1 fills on
// the caller's thread.
void fill_table_rows_parallel(const TableSpec& table, uint64_t seed, int64_t first_row, std::span<std::byte> rows_bytes,
                              int threads);

}  // namespace engram
