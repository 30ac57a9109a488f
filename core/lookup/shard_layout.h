// How a table is cut: contiguous row shards over a group of ranks (device
// placements) and head shards over a node's DP replicas (host_head_sharded).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace engram {

// Rank r of `shard_count` owns rows [N*r/shard_count, N*(r+1)/shard_count).
// Uneven N leaves shards differing by at most one row. The starts are
// computed, not stored: a layout over a group of thousands of ranks is held
// by every member.
class RowShardLayout {
 public:
  RowShardLayout(int64_t row_count, int shard_count);

  int shard_count() const { return shard_count_; }
  int64_t row_count() const { return row_count_; }
  int64_t shard_begin(int shard) const;
  int64_t shard_end(int shard) const { return shard_begin(shard + 1); }
  int64_t shard_rows(int shard) const { return shard_end(shard) - shard_begin(shard); }
  int64_t max_shard_rows() const;
  // shard_count + 1 entries; the last is row_count. Kernels copy this.
  std::vector<int64_t> starts() const;

  // Owner of `row`: the last shard whose start <= row (what the peer
  // kernel's binary search over the starts finds); -1 for rows outside
  // [0, row_count).
  int owner_of(int64_t row) const;

 private:
  int64_t row_count_ = 0;
  int shard_count_ = 1;
};

// Heads [begin, end) of shard s when `head_count` heads are dealt over
// `shard_count` ranks: ceil-sized shards, so an uneven count leaves the last
// shard short (possibly empty).
struct HeadRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
};
HeadRange head_shard(int head_count, int shard_count, int shard);
int head_owner(int head_count, int shard_count, int head);

}  // namespace engram
