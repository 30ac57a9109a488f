#include "core/lookup/shard_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace engram {
namespace {

TEST(RowShardLayout, EvenSplitFollowsTheFormula) {
  RowShardLayout layout(10, 3);  // [0,3) [3,6) [6,10)
  EXPECT_EQ(layout.shard_begin(0), 0);
  EXPECT_EQ(layout.shard_begin(1), 3);
  EXPECT_EQ(layout.shard_begin(2), 6);
  EXPECT_EQ(layout.shard_end(2), 10);
  EXPECT_EQ(layout.max_shard_rows(), 4);
}

TEST(RowShardLayout, OwnerByBinarySearchAgreesWithRanges) {
  for (int64_t rows : {0, 1, 5, 7, 100, 1031}) {
    for (int shards : {1, 2, 3, 8, 9}) {
      RowShardLayout layout(rows, shards);
      for (int64_t row = -2; row < rows + 2; ++row) {
        int owner = layout.owner_of(row);
        if (row < 0 || row >= rows) {
          EXPECT_EQ(owner, -1);
          continue;
        }
        ASSERT_GE(owner, 0);
        EXPECT_LE(layout.shard_begin(owner), row);
        EXPECT_LT(row, layout.shard_end(owner));
        EXPECT_EQ(owner, static_cast<int>(static_cast<__int128>(row + 1) * shards / rows +
                                          ((static_cast<__int128>(row + 1) * shards % rows) ? 1 : 0)) - 1)
            << "rows=" << rows << " shards=" << shards << " row=" << row;
      }
    }
  }
}

// The computed layout against what a kernel does with the starts it copies:
// upper_bound over them, and the widest shard among them.
TEST(RowShardLayout, OwnerIsTheLastShardStartingAtOrBeforeTheRow) {
  for (int64_t rows : {0, 1, 2, 5, 7, 64, 100, 1031}) {
    for (int shards : {1, 2, 3, 4, 7, 8, 9, 16, 17, 64, 1152}) {
      RowShardLayout layout(rows, shards);
      const std::vector<int64_t> starts = layout.starts();
      ASSERT_EQ(starts.size(), static_cast<size_t>(shards) + 1);
      ASSERT_EQ(starts.front(), 0);
      ASSERT_EQ(starts.back(), rows);
      int64_t widest = 0;
      for (int s = 0; s < shards; ++s) {
        ASSERT_LE(starts[s], starts[s + 1]);
        EXPECT_EQ(layout.shard_begin(s), starts[s]);
        EXPECT_EQ(layout.shard_rows(s), starts[s + 1] - starts[s]);
        widest = std::max(widest, starts[s + 1] - starts[s]);
      }
      EXPECT_EQ(layout.max_shard_rows(), widest) << "rows=" << rows << " shards=" << shards;
      for (int64_t row = 0; row < rows; ++row) {
        const auto at = std::upper_bound(starts.begin(), starts.end(), row);
        EXPECT_EQ(layout.owner_of(row), static_cast<int>(at - starts.begin()) - 1)
            << "rows=" << rows << " shards=" << shards << " row=" << row;
      }
    }
  }
}

TEST(RowShardLayout, V41SizedTableDoesNotOverflow) {
  RowShardLayout layout(384'016'682, 1152);
  EXPECT_EQ(layout.shard_end(1151), 384'016'682);
  EXPECT_EQ(layout.owner_of(384'016'681), 1151);
}

TEST(HeadShard, UnevenCountLeavesTheLastShardShort) {
  // 24 heads over 5 ranks: 5,5,5,5,4.
  EXPECT_EQ(head_shard(24, 5, 0).size(), 5);
  EXPECT_EQ(head_shard(24, 5, 4).size(), 4);
  EXPECT_EQ(head_shard(24, 5, 4).end, 24);
  // 3 heads over 4 ranks: 1,1,1,0.
  EXPECT_EQ(head_shard(3, 4, 3).size(), 0);
  for (int h = 0; h < 24; ++h) {
    int owner = head_owner(24, 5, h);
    HeadRange r = head_shard(24, 5, owner);
    EXPECT_TRUE(r.begin <= h && h < r.end);
  }
}

}  // namespace
}  // namespace engram
