// How the host placements cut a table's heads over tensor parallelism, as
// the engines cut them (vLLM's ParallelEngramEmbedding, SGLang's host
// tables): a TP rank holds whole heads, never part of a head's bucket.
//
// - TP slice (host_private, host_shared): TP rank t of `tp` holds heads
//   [t*c, (t+1)*c), c = ceil(heads / tp), clamped to the table: the last
//   slice is padded (short, or empty when tp > heads).
// - Engram DP head shard (host_head_sharded): the heads are cut into
//   tp * g shards of ceil(heads / (tp * g)), g = the rank's Engram DP group
//   (the node-local replicas' ranks of its TP rank), and the member with
//   index i of TP rank t's group holds shard t * g + i (TP-major), so a DP
//   gather brings in contiguous heads and the TP gather completes the head
//   order. Its TP rank's group together holds heads
//   [t*g*p, (t+1)*g*p), p = ceil(heads / (tp * g)), clamped to the table.
//
// A TP rank's "block" is what its rank (host_private, host_shared) or its
// Engram DP group (host_head_sharded) holds: TpHeadBlocks names it for every
// TP rank, so a lookup can tell which TP rank holds any row.
#pragma once

#include <cstdint>
#include <vector>

#include "core/lookup/shard_layout.h"
#include "core/model/table_spec.h"

namespace engram {

struct RowRange {
  int64_t first_row = 0;
  int64_t row_count = 0;
};

// The rows of heads [heads.begin, heads.end) of `table`: contiguous (a
// head's bucket follows the one before it).
RowRange rows_of_heads(const TableSpec& table, HeadRange heads);
// Bytes of those rows in every table of `model`, each table's heads given by `heads_of`.
template <typename HeadsOf>
uint64_t head_rows_bytes(const ModelSpec& model, HeadsOf heads_of) {
  uint64_t total = 0;
  for (const TableSpec& t : model.tables)
    total += static_cast<uint64_t>(rows_of_heads(t, heads_of(t)).row_count) * t.row_bytes();
  return total;
}

// TP rank `tp_rank`'s slice: heads [t*c, (t+1)*c), c = ceil(head_count / tp_size).
HeadRange tp_head_slice(int head_count, int tp_size, int tp_rank);

// Bytes of TP rank `tp_rank`'s slice of every table of `model`.
uint64_t tp_slice_host_bytes(const ModelSpec& model, int tp_size, int tp_rank);

// The Engram DP head shard index of member `dp_index` of TP rank
// `tp_rank`'s group of `dp_group_size`: tp_rank * dp_group_size + dp_index.
int engram_head_shard_rank(int tp_rank, int dp_group_size, int dp_index);
// That shard's heads (of tp_size * dp_group_size ceil-sized shards).
HeadRange engram_head_shard(int head_count, int tp_size, int tp_rank, int dp_group_size, int dp_index);

// The block each TP rank holds: [t*w, (t+1)*w) clamped to the heads, with
// w = ceil(heads / tp) for TP slices and g * ceil(heads / (tp * g)) for
// Engram DP groups of g.
class TpHeadBlocks {
 public:
  static TpHeadBlocks tp_slices(int head_count, int tp_size);
  static TpHeadBlocks engram_dp_groups(int head_count, int tp_size, int dp_group_size);

  int tp_size() const { return tp_size_; }
  int head_count() const { return head_count_; }
  int block_width() const { return width_; }  // heads per block, the padded ones counted
  HeadRange block(int tp_rank) const;
  int block_of_head(int head) const;  // the TP rank whose block holds head position `head`
  // Each block's first row in `table`, then the row count (tp + 1 entries).
  std::vector<int64_t> row_bounds(const TableSpec& table) const;
  // The TP rank whose block holds `row` (bounds from row_bounds); -1 outside the table.
  static int block_of_row(const std::vector<int64_t>& bounds, int64_t row);

 private:
  TpHeadBlocks(int head_count, int tp_size, int width);
  int head_count_ = 0;
  int tp_size_ = 1;
  int width_ = 0;
};

}  // namespace engram
