#include "core/lookup/shard_layout.h"

#include <algorithm>

#include "core/base/status.h"

namespace engram {

RowShardLayout::RowShardLayout(int64_t row_count, int shard_count) : row_count_(row_count), shard_count_(shard_count) {
  ENGRAM_CHECK(row_count >= 0);
  ENGRAM_CHECK(shard_count >= 1);
}

int64_t RowShardLayout::shard_begin(int shard) const {
  ENGRAM_CHECK(shard >= 0 && shard <= shard_count_);
  // 128-bit product: V4.1 row counts times large groups overflow int64 otherwise.
  return static_cast<int64_t>(static_cast<__int128>(row_count_) * shard / shard_count_);
}

int64_t RowShardLayout::max_shard_rows() const {
  // Shards differ by at most one row: the largest is the ceiling.
  return (row_count_ + shard_count_ - 1) / shard_count_;
}

std::vector<int64_t> RowShardLayout::starts() const {
  std::vector<int64_t> out(static_cast<size_t>(shard_count_) + 1);
  for (int r = 0; r <= shard_count_; ++r) out[static_cast<size_t>(r)] = shard_begin(r);
  ENGRAM_CHECK(out.front() == 0 && out.back() == row_count_);
  return out;
}

int RowShardLayout::owner_of(int64_t row) const {
  if (row < 0 || row >= row_count_) return -1;
  // The largest r with floor(N*r/n) <= row is floor((n*(row+1) - 1) / N).
  // Empty shards (N < n) share their start with the next shard; this lands
  // on the shard that really holds the row, as upper_bound over the starts.
  const auto owner = static_cast<int>(
      (static_cast<__int128>(shard_count_) * (row + 1) - 1) / static_cast<__int128>(row_count_));
  ENGRAM_CHECK(owner >= 0 && owner < shard_count_);
  ENGRAM_CHECK(shard_begin(owner) <= row && row < shard_end(owner));
  return owner;
}

HeadRange head_shard(int head_count, int shard_count, int shard) {
  ENGRAM_CHECK(head_count >= 0 && shard_count >= 1 && shard >= 0 && shard < shard_count);
  int per = (head_count + shard_count - 1) / shard_count;
  HeadRange r;
  r.begin = std::min(head_count, per * shard);
  r.end = std::min(head_count, per * (shard + 1));
  return r;
}

int head_owner(int head_count, int shard_count, int head) {
  ENGRAM_CHECK(head >= 0 && head < head_count);
  int per = (head_count + shard_count - 1) / shard_count;
  return head / per;
}

}  // namespace engram
