#include "core/lookup/tp_heads.h"

#include <algorithm>

#include "core/base/status.h"

namespace engram {

RowRange rows_of_heads(const TableSpec& table, HeadRange heads) {
  ENGRAM_CHECK(heads.begin >= 0 && heads.begin <= heads.end && heads.end <= table.head_count());
  RowRange rows;
  rows.first_row = table.head_offset(heads.begin);
  rows.row_count = table.head_offset(heads.end) - rows.first_row;
  ENGRAM_CHECK(rows.first_row >= 0 && rows.row_count >= 0 && rows.first_row + rows.row_count <= table.row_count());
  return rows;
}

HeadRange tp_head_slice(int head_count, int tp_size, int tp_rank) {
  ENGRAM_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size);
  return head_shard(head_count, tp_size, tp_rank);
}

uint64_t tp_slice_host_bytes(const ModelSpec& model, int tp_size, int tp_rank) {
  return head_rows_bytes(model, [&](const TableSpec& t) { return tp_head_slice(t.head_count(), tp_size, tp_rank); });
}

int engram_head_shard_rank(int tp_rank, int dp_group_size, int dp_index) {
  ENGRAM_CHECK(tp_rank >= 0 && dp_group_size >= 1 && dp_index >= 0 && dp_index < dp_group_size);
  return tp_rank * dp_group_size + dp_index;
}

HeadRange engram_head_shard(int head_count, int tp_size, int tp_rank, int dp_group_size, int dp_index) {
  ENGRAM_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size);
  return head_shard(head_count, tp_size * dp_group_size, engram_head_shard_rank(tp_rank, dp_group_size, dp_index));
}

TpHeadBlocks::TpHeadBlocks(int head_count, int tp_size, int width)
    : head_count_(head_count), tp_size_(tp_size), width_(width) {
  ENGRAM_CHECK(head_count >= 1 && tp_size >= 1 && width >= 1);
  ENGRAM_CHECK(static_cast<int64_t>(width) * tp_size >= head_count);  // every head in some block
}

TpHeadBlocks TpHeadBlocks::tp_slices(int head_count, int tp_size) {
  ENGRAM_CHECK(head_count >= 1 && tp_size >= 1);
  return TpHeadBlocks(head_count, tp_size, (head_count + tp_size - 1) / tp_size);
}

TpHeadBlocks TpHeadBlocks::engram_dp_groups(int head_count, int tp_size, int dp_group_size) {
  ENGRAM_CHECK(head_count >= 1 && tp_size >= 1 && dp_group_size >= 1);
  const int shards = tp_size * dp_group_size;
  return TpHeadBlocks(head_count, tp_size, dp_group_size * ((head_count + shards - 1) / shards));
}

HeadRange TpHeadBlocks::block(int tp_rank) const {
  ENGRAM_CHECK(tp_rank >= 0 && tp_rank < tp_size_);
  return {std::min(head_count_, tp_rank * width_), std::min(head_count_, (tp_rank + 1) * width_)};
}

int TpHeadBlocks::block_of_head(int head) const {
  ENGRAM_CHECK(head >= 0 && head < head_count_);
  return head / width_;
}

std::vector<int64_t> TpHeadBlocks::row_bounds(const TableSpec& table) const {
  ENGRAM_CHECK(table.head_count() == head_count_);
  std::vector<int64_t> bounds(static_cast<size_t>(tp_size_) + 1);
  for (int t = 0; t < tp_size_; ++t) bounds[static_cast<size_t>(t)] = table.head_offset(block(t).begin);
  bounds.back() = table.row_count();
  return bounds;
}

int TpHeadBlocks::block_of_row(const std::vector<int64_t>& bounds, int64_t row) {
  ENGRAM_CHECK(bounds.size() >= 2);
  if (row < 0 || row >= bounds.back()) return -1;
  // Last block starting at or before the row; empty (padded) blocks share a start, upper_bound skips them.
  const auto it = std::upper_bound(bounds.begin(), bounds.end() - 1, row);
  return static_cast<int>(it - bounds.begin()) - 1;
}

}  // namespace engram
