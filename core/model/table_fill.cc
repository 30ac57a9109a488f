#include "core/model/table_fill.h"

#include <thread>
#include <vector>

#include "core/base/status.h"
#include "core/model/table_fill_row.h"

namespace engram {

void fill_table_rows(const TableSpec& table, uint64_t seed, int64_t first_row, std::span<std::byte> rows_bytes) {
  const uint64_t row_bytes = table.row_bytes();
  ENGRAM_CHECK(row_bytes > 0 && rows_bytes.size() % row_bytes == 0);
  ENGRAM_CHECK(first_row >= 0);
  const int64_t rows = static_cast<int64_t>(rows_bytes.size() / row_bytes);
  ENGRAM_CHECK(first_row + rows <= table.row_count());
  const uint64_t layer_seed = fill::layer_seed(seed, table.layer_id);
  const bool fp8 = table.row_format == RowFormat::kFp8E4M3Ue8m0;
  for (int64_t i = 0; i < rows; ++i) {
    auto* out = reinterpret_cast<uint8_t*>(rows_bytes.data()) + static_cast<size_t>(i) * row_bytes;
    fill::fill_row(fp8, table.dim, layer_seed, static_cast<uint64_t>(first_row + i), out);
  }
}

void fill_table_rows_parallel(const TableSpec& table, uint64_t seed, int64_t first_row, std::span<std::byte> rows_bytes,
                              int threads) {
  const uint64_t row_bytes = table.row_bytes();
  ENGRAM_CHECK(row_bytes > 0 && rows_bytes.size() % row_bytes == 0);
  const int64_t rows = static_cast<int64_t>(rows_bytes.size() / row_bytes);
  threads = static_cast<int>(std::min<int64_t>(std::max(threads, 1), std::max<int64_t>(rows, 1)));
  if (threads <= 1) {
    fill_table_rows(table, seed, first_row, rows_bytes);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    const int64_t begin = rows * t / threads;
    const int64_t end = rows * (t + 1) / threads;
    pool.emplace_back([&table, seed, first_row, rows_bytes, row_bytes, begin, end] {
      fill_table_rows(table, seed, first_row + begin,
                      rows_bytes.subspan(static_cast<size_t>(begin) * row_bytes,
                                         static_cast<size_t>(end - begin) * row_bytes));
    });
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace engram
