#include "core/model/table_fill.h"

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

}  // namespace engram
