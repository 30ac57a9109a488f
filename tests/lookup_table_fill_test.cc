#include "core/model/table_fill.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/model/row_format.h"
#include "core/model/table_fill_row.h"

namespace engram {
namespace {

TableSpec small_table(RowFormat format) {
  auto spec = make_model_spec("fill", 300, {2}, {2, 3}, 2, format, 64, 5);
  EXPECT_TRUE(spec.is_ok());
  return spec->tables[0];
}

TEST(TableFill, ThreadsWriteTheSameBytesAsOneThread) {
  for (RowFormat format : {RowFormat::kFp8E4M3Ue8m0, RowFormat::kBf16}) {
    const TableSpec table = small_table(format);
    std::vector<std::byte> one(table.table_bytes()), many(table.table_bytes(), std::byte{0x5a});
    fill_table_rows(table, 31, 0, one);
    for (int threads : {2, 3, 7, 1000}) {
      fill_table_rows_parallel(table, 31, 0, many, threads);
      EXPECT_TRUE(one == many) << threads << " threads";
    }
    // A part of the table, from the middle.
    const int64_t first = table.row_count() / 3;
    std::vector<std::byte> part(static_cast<size_t>(table.row_count() / 2) * table.row_bytes());
    fill_table_rows_parallel(table, 31, first, part, 4);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), one.begin() + first * table.row_bytes()));
  }
}

// The row's bytes as the fill first wrote them, one value at a time: the
// definition the stores of whole draws must keep.
void reference_row(bool fp8, int dim, uint64_t layer_seed, uint64_t row, uint8_t* out) {
  uint64_t state = fill::start_state(layer_seed, row);
  const bool special_row = (fill::next(state) & 3) == 0;
  if (fp8) {
    for (int v = 0; v < dim; v += 8) {
      const uint64_t bits = fill::next(state);
      for (int b = 0; b < 8 && v + b < dim; ++b) {
        uint8_t code = static_cast<uint8_t>(bits >> (8 * b));
        if (special_row && (code & 1)) code = fill::fp8_special(code >> 1);
        out[v + b] = code;
      }
    }
    for (int block = 0; block < dim / 32; ++block) out[dim + block] = fill::draw_scale(state);
    return;
  }
  for (int v = 0; v < dim; v += 4) {
    const uint64_t bits = fill::next(state);
    for (int b = 0; b < 4 && v + b < dim; ++b) {
      uint16_t value = static_cast<uint16_t>(bits >> (16 * b));
      if (special_row && (value & 1)) value = fill::bf16_special(value >> 1);
      out[2 * (v + b)] = static_cast<uint8_t>(value & 0xffu);
      out[2 * (v + b) + 1] = static_cast<uint8_t>(value >> 8);
    }
  }
}

TEST(TableFill, RowsEqualTheValueAtATimeDefinition) {
  // Dims a whole number of draws and not (the tail takes the value loop);
  // both formats; ordinary and special rows (one in four).
  for (bool fp8 : {true, false}) {
    for (int dim : {1, 3, 4, 7, 8, 12, 32, 64, 256, 1000}) {
      const uint64_t layer_seed = fill::layer_seed(31, 14);
      const int row_bytes = fp8 ? dim + dim / 32 : 2 * dim;
      std::vector<uint8_t> want(static_cast<size_t>(row_bytes) + 8, 0xa5), got(want);
      int special_rows = 0;
      for (uint64_t row = 0; row < 200; ++row) {
        reference_row(fp8, dim, layer_seed, row, want.data());
        fill::fill_row(fp8, dim, layer_seed, row, got.data());
        ASSERT_EQ(want, got) << (fp8 ? "fp8" : "bf16") << " dim " << dim << " row " << row;
        uint64_t state = fill::start_state(layer_seed, row);
        special_rows += (fill::next(state) & 3) == 0;
      }
      EXPECT_GT(special_rows, 20);
      EXPECT_LT(special_rows, 200 - 20);
      // Nothing written past the row.
      EXPECT_EQ(got[static_cast<size_t>(row_bytes)], 0xa5);
    }
  }
}

TEST(TableFill, PiecesEqualTheWholeAndSeedsDiffer) {
  for (RowFormat format : {RowFormat::kFp8E4M3Ue8m0, RowFormat::kBf16}) {
    const TableSpec table = small_table(format);
    std::vector<std::byte> whole(table.table_bytes());
    fill_table_rows(table, 77, 0, whole);
    // A rank filling only its shard writes the same bytes as a whole fill.
    const int64_t split = table.row_count() / 3;
    std::vector<std::byte> tail(static_cast<size_t>(table.row_count() - split) * table.row_bytes());
    fill_table_rows(table, 77, split, tail);
    EXPECT_EQ(std::memcmp(tail.data(), whole.data() + static_cast<size_t>(split) * table.row_bytes(), tail.size()), 0);
    std::vector<std::byte> other(whole.size());
    fill_table_rows(table, 78, 0, other);
    EXPECT_NE(whole, other);
  }
}

TEST(TableFill, Fp8RowsCarryEverySpecialValue) {
  const TableSpec table = small_table(RowFormat::kFp8E4M3Ue8m0);
  std::vector<std::byte> bytes(table.table_bytes());
  fill_table_rows(table, 1, 0, bytes);
  bool neg_zero = false, nan = false, subnormal = false, max = false, scale0 = false, scale255 = false;
  int distinct_scales = 0;
  bool seen_scale[256] = {};
  for (int64_t row = 0; row < table.row_count(); ++row) {
    const auto* r = reinterpret_cast<const uint8_t*>(bytes.data()) + static_cast<size_t>(row) * table.row_bytes();
    for (int i = 0; i < table.dim; ++i) {
      neg_zero |= r[i] == 0x80;
      nan |= (r[i] & 0x7f) == 0x7f;
      subnormal |= (r[i] & 0x78) == 0 && (r[i] & 7) != 0;
      max |= (r[i] & 0x7f) == 0x7e;
    }
    for (int b = 0; b < table.dim / kScaleBlock; ++b) {
      const uint8_t e = r[table.dim + b];
      scale0 |= e == 0;
      scale255 |= e == 255;
      if (!seen_scale[e]) ++distinct_scales;
      seen_scale[e] = true;
    }
  }
  EXPECT_TRUE(neg_zero && nan && subnormal && max && scale0 && scale255);
  EXPECT_GT(distinct_scales, 20);
}

TEST(TableFill, Bf16RowsCarryEverySpecialValue) {
  const TableSpec table = small_table(RowFormat::kBf16);
  std::vector<std::byte> bytes(table.table_bytes());
  fill_table_rows(table, 1, 0, bytes);
  std::vector<uint16_t> values(bytes.size() / 2);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  auto has = [&](auto pred) { return std::any_of(values.begin(), values.end(), pred); };
  EXPECT_TRUE(has([](uint16_t v) { return v == 0x8000; }));
  EXPECT_TRUE(has([](uint16_t v) { return (v & 0x7f80) == 0x7f80 && (v & 0x7f) != 0; }));
  EXPECT_TRUE(has([](uint16_t v) { return (v & 0x7f80) == 0 && (v & 0x7f) != 0; }));
  EXPECT_TRUE(has([](uint16_t v) { return (v & 0x7fff) == 0x7f7f; }));
}

}  // namespace
}  // namespace engram
