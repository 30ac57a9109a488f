#include "core/lookup/lookup_rows.h"

#include <algorithm>
#include <vector>

#include "core/lookup/lookup_types.h"
#include "core/model/row_format.h"
#include "core/base/status.h"

namespace engram {
namespace {

struct Shape {
  size_t heads;
  size_t dim;
  uint64_t row_bytes;
  size_t tokens;
};

Shape shape_of(const TableSpec& table, std::span<const int64_t> row_ids, size_t heads_out, size_t out_size) {
  Shape s{static_cast<size_t>(table.head_count()), static_cast<size_t>(table.dim), table.row_bytes(), 0};
  ENGRAM_CHECK(s.heads > 0 && s.dim > 0);
  ENGRAM_CHECK(row_ids.size() % s.heads == 0);
  s.tokens = row_ids.size() / s.heads;
  ENGRAM_CHECK(out_size == s.tokens * heads_out * s.dim);
  return s;
}

std::span<const std::byte> row_at(std::span<const std::byte> bytes, int64_t row_in_span, uint64_t row_bytes) {
  // Callers establish the row lies in the span; this is the last line of defence.
  ENGRAM_CHECK(row_in_span >= 0 && (static_cast<uint64_t>(row_in_span) + 1) * row_bytes <= bytes.size());
  return bytes.subspan(static_cast<size_t>(row_in_span) * row_bytes, row_bytes);
}

// Rows of a token are scattered over the table: without a hint each read is
// a serial DRAM miss. Touching the next token's rows first lets them overlap.
inline void prefetch_row(const std::byte* row, uint64_t row_bytes) {
  for (uint64_t at = 0; at < row_bytes; at += 64) __builtin_prefetch(row + at);
}
constexpr size_t kPrefetchTokensAhead = 2;

}  // namespace

void lookup_rows_whole_table(const TableSpec& table, std::span<const std::byte> table_bytes,
                             std::span<const int64_t> row_ids, std::span<uint16_t> out) {
  const Shape s = shape_of(table, row_ids, static_cast<size_t>(table.head_count()), out.size());
  ENGRAM_CHECK(table_bytes.size() == table.table_bytes());
  const int64_t row_count = table.row_count();
  for (size_t t = 0; t < s.tokens; ++t) {
    if (t + kPrefetchTokensAhead < s.tokens)
      for (size_t h = 0; h < s.heads; ++h) {
        const int64_t ahead = row_ids[(t + kPrefetchTokensAhead) * s.heads + h];
        if (row_in_table(row_count, ahead)) prefetch_row(table_bytes.data() + static_cast<uint64_t>(ahead) * s.row_bytes, s.row_bytes);
      }
    for (size_t h = 0; h < s.heads; ++h) {
      const int64_t row = row_ids[t * s.heads + h];
      std::span<uint16_t> dst = out.subspan((t * s.heads + h) * s.dim, s.dim);
      if (!row_in_table(row_count, row)) {
        std::fill(dst.begin(), dst.end(), uint16_t{0});
        continue;
      }
      dequantize_row(table, row_at(table_bytes, row, s.row_bytes), dst);
    }
  }
}


void lookup_rows_in_range(const TableSpec& table, int64_t first_row, int64_t row_count,
                          std::span<const std::byte> range_bytes, std::span<const int64_t> row_ids,
                          std::span<uint16_t> out) {
  const Shape s = shape_of(table, row_ids, static_cast<size_t>(table.head_count()), out.size());
  ENGRAM_CHECK(first_row >= 0 && row_count >= 0 && first_row + row_count <= table.row_count());
  ENGRAM_CHECK(range_bytes.size() == static_cast<uint64_t>(row_count) * s.row_bytes);
  std::fill(out.begin(), out.end(), uint16_t{0});
  const int64_t begin = first_row;
  const int64_t end = first_row + row_count;
  const std::span<const std::byte> shard_bytes = range_bytes;
  for (size_t t = 0; t < s.tokens; ++t) {
    if (t + kPrefetchTokensAhead < s.tokens)
      for (size_t h = 0; h < s.heads; ++h) {
        const int64_t ahead = row_ids[(t + kPrefetchTokensAhead) * s.heads + h];
        if (ahead >= begin && ahead < end)
          prefetch_row(shard_bytes.data() + static_cast<uint64_t>(ahead - begin) * s.row_bytes, s.row_bytes);
      }
    for (size_t h = 0; h < s.heads; ++h) {
      const int64_t row = row_ids[t * s.heads + h];
      if (row < begin || row >= end) continue;  // DEAD and past-the-table ids fall here too
      dequantize_row(table, row_at(shard_bytes, row - begin, s.row_bytes),
                     out.subspan((t * s.heads + h) * s.dim, s.dim));
    }
  }
}

void lookup_rows_head_shard(const TableSpec& table, HeadRange heads, int64_t shard_first_row,
                            std::span<const std::byte> shard_bytes, std::span<const int64_t> row_ids,
                            std::span<uint16_t> out) {
  ENGRAM_CHECK(heads.begin >= 0 && heads.begin <= heads.end && heads.end <= table.head_count());
  const Shape s = shape_of(table, row_ids, static_cast<size_t>(heads.size()), out.size());
  ENGRAM_CHECK(shard_first_row >= 0 && shard_bytes.size() % s.row_bytes == 0);
  const int64_t shard_end = shard_first_row + static_cast<int64_t>(shard_bytes.size() / s.row_bytes);
  ENGRAM_CHECK(shard_end <= table.row_count());
  const size_t width = static_cast<size_t>(heads.size());
  for (size_t t = 0; t < s.tokens; ++t) {
    if (t + kPrefetchTokensAhead < s.tokens)
      for (int h = heads.begin; h < heads.end; ++h) {
        const int64_t ahead = row_ids[(t + kPrefetchTokensAhead) * s.heads + static_cast<size_t>(h)];
        if (ahead >= shard_first_row && ahead < shard_end)
          prefetch_row(shard_bytes.data() + static_cast<uint64_t>(ahead - shard_first_row) * s.row_bytes, s.row_bytes);
      }
    for (int h = heads.begin; h < heads.end; ++h) {
      const int64_t row = row_ids[t * s.heads + static_cast<size_t>(h)];
      std::span<uint16_t> dst = out.subspan((t * width + static_cast<size_t>(h - heads.begin)) * s.dim, s.dim);
      if (row < shard_first_row || row >= shard_end) {
        std::fill(dst.begin(), dst.end(), uint16_t{0});
        continue;
      }
      dequantize_row(table, row_at(shard_bytes, row - shard_first_row, s.row_bytes), dst);
    }
  }
}

}  // namespace engram
