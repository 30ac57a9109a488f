#include "core/lookup/shard_layout.h"

#include <algorithm>

#include "core/base/status.h"

namespace engram {

RowShardLayout::RowShardLayout(int64_t row_count, int shard_count) {
  ENGRAM_CHECK(row_count >= 0);
  ENGRAM_CHECK(shard_count >= 1);
  starts_.resize(static_cast<size_t>(shard_count) + 1);
  for (int r = 0; r <= shard_count; ++r) {
    // 128-bit product: V4.1 row counts times large groups overflow int64 otherwise.
    __int128 start = static_cast<__int128>(row_count) * r / shard_count;
    starts_[static_cast<size_t>(r)] = static_cast<int64_t>(start);
  }
  ENGRAM_CHECK(starts_.front() == 0 && starts_.back() == row_count);
}

int64_t RowShardLayout::max_shard_rows() const {
  int64_t rows = 0;
  for (int s = 0; s < shard_count(); ++s) rows = std::max(rows, shard_rows(s));
  return rows;
}

int RowShardLayout::owner_of(int64_t row) const {
  if (row < 0 || row >= row_count()) return -1;
  // Last start <= row. Empty shards (row_count < shard_count) share a start;
  // upper_bound skips them and lands on the shard that really holds the row.
  auto it = std::upper_bound(starts_.begin(), starts_.end(), row);
  int owner = static_cast<int>(it - starts_.begin()) - 1;
  ENGRAM_CHECK(owner >= 0 && owner < shard_count());
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
