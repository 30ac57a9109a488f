#include "kernels/gather_reference.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/base/bf16.h"
#include "core/model/row_format.h"
#include "core/model/table_fill.h"
#include "core/base/status.h"

namespace engram::kernels {
namespace {

// One output value, as a kernel thread computes it.
uint16_t value_at(const TableSpec& table, const uint8_t* row, int i) {
  uint16_t bits;
  if (table.row_format == RowFormat::kFp8E4M3Ue8m0) {
    bits = dequantize_fp8_e4m3_to_bf16(row[i], row[table.dim + i / kScaleBlock], table.scale_byte_rule);
  } else {
    std::memcpy(&bits, row + 2 * i, 2);
    if (bf16_is_nan(bits)) bits = static_cast<uint16_t>(kBf16CanonicalNan | (bits & 0x8000u));
  }
  // -0 -> +0, as the collective's sum does, unless the table's engine keeps it.
  return bits == 0x8000u && table.minus_zero == MinusZeroRule::kWritePlusZero ? uint16_t{0} : bits;
}

}  // namespace

void row_reference(const TableSpec& table, std::span<const std::byte> row, std::span<uint16_t> out) {
  ENGRAM_CHECK(row.size() == table.row_bytes() && out.size() == static_cast<size_t>(table.dim));
  const auto* src = reinterpret_cast<const uint8_t*>(row.data());
  for (size_t i = 0; i < out.size(); ++i) out[i] = value_at(table, src, static_cast<int>(i));
}

void filled_lookup_reference(const TableSpec& table, uint64_t fill_seed, std::span<const int64_t> row_ids,
                             std::span<uint16_t> out) {
  const size_t dim = static_cast<size_t>(table.dim);
  ENGRAM_CHECK(out.size() == row_ids.size() * dim);
  std::vector<std::byte> row(table.row_bytes());
  for (size_t s = 0; s < row_ids.size(); ++s) {
    const std::span<uint16_t> slot = out.subspan(s * dim, dim);
    const int64_t id = row_ids[s];
    if (id < 0 || id >= table.row_count()) {  // DEAD and out-of-table ids read no row
      std::fill(slot.begin(), slot.end(), uint16_t{0});
      continue;
    }
    fill_table_rows(table, fill_seed, id, row);
    row_reference(table, row, slot);
  }
}

void gather_peer_reference(const TableSpec& table, const RowShardLayout& layout,
                           std::span<const std::span<const std::byte>> shards_by_owner,
                           std::span<const int64_t> row_ids, std::span<uint16_t> out) {
  const int heads = table.head_count();
  const size_t dim = static_cast<size_t>(table.dim);
  const uint64_t row_bytes = table.row_bytes();
  ENGRAM_CHECK(heads > 0 && row_ids.size() % static_cast<size_t>(heads) == 0);
  ENGRAM_CHECK(out.size() == row_ids.size() * dim);
  ENGRAM_CHECK(static_cast<int>(shards_by_owner.size()) == layout.shard_count());
  ENGRAM_CHECK(layout.row_count() == table.row_count());
  for (size_t slot = 0; slot < row_ids.size(); ++slot) {
    uint16_t* dst = out.data() + slot * dim;
    const int owner = layout.owner_of(row_ids[slot]);  // -1: DEAD, negative or past the table
    if (owner < 0) {
      for (size_t i = 0; i < dim; ++i) dst[i] = 0;
      continue;
    }
    const int64_t row = row_ids[slot];
    const std::span<const std::byte> shard = shards_by_owner[static_cast<size_t>(owner)];
    const uint64_t at = static_cast<uint64_t>(row - layout.shard_begin(owner)) * row_bytes;
    ENGRAM_CHECK(at + row_bytes <= shard.size());
    const auto* src = reinterpret_cast<const uint8_t*>(shard.data()) + at;
    for (size_t i = 0; i < dim; ++i) dst[i] = value_at(table, src, static_cast<int>(i));
  }
}

void gather_owned_reference(const TableSpec& table, const RowShardLayout& layout, int shard,
                            std::span<const std::byte> shard_bytes, std::span<const int64_t> row_ids,
                            std::span<uint16_t> out) {
  const int heads = table.head_count();
  const size_t dim = static_cast<size_t>(table.dim);
  const uint64_t row_bytes = table.row_bytes();
  ENGRAM_CHECK(heads > 0 && row_ids.size() % static_cast<size_t>(heads) == 0);
  ENGRAM_CHECK(out.size() == row_ids.size() * dim);
  ENGRAM_CHECK(shard >= 0 && shard < layout.shard_count());
  ENGRAM_CHECK(shard_bytes.size() == static_cast<uint64_t>(layout.shard_rows(shard)) * row_bytes);
  for (uint16_t& v : out) v = 0;
  for (size_t slot = 0; slot < row_ids.size(); ++slot) {
    const int64_t row = row_ids[slot];
    if (layout.owner_of(row) != shard) continue;
    const auto* src = reinterpret_cast<const uint8_t*>(shard_bytes.data()) +
                      static_cast<uint64_t>(row - layout.shard_begin(shard)) * row_bytes;
    for (size_t i = 0; i < dim; ++i) out[slot * dim + i] = value_at(table, src, static_cast<int>(i));
  }
}

}  // namespace engram::kernels
