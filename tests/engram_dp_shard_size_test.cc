// vLLM's node-local Engram DP group size (core/deployment/engram_dp_shard_size.h)
// against vLLM's own test, and the difference from our host-map groups,
// pinned on purpose.
#include "core/deployment/engram_dp_shard_size.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/deployment/node_local_group.h"

namespace engram {
namespace {

std::vector<int> repeat(std::initializer_list<std::pair<int, int>> node_and_count) {
  std::vector<int> out;
  for (auto [node, count] : node_and_count) out.insert(out.end(), static_cast<size_t>(count), node);
  return out;
}

int size_of(const std::vector<int>& node_of_rank, int dp, int replica) {
  Result<int> size = engram_dp_shard_size(node_of_rank, dp, replica);
  EXPECT_TRUE(size.is_ok()) << size.status().to_string();
  return size.is_ok() ? *size : -1;
}

// vLLM's tests/distributed/test_engram_dp_shard.py,
// test_engram_dp_shard_size_respects_node_boundaries, its newest 9 cases
// (node_ids, dp_size, replica_size) -> expected: node ids per rank, in rank order.
TEST(EngramDpShardSize, VllmsNineCases) {
  struct Case {
    std::vector<int> node_ids;
    int dp, replica, expected;
  };
  const std::vector<Case> cases = {
      {repeat({{0, 4}}), 1, 4, 1},
      {repeat({{0, 4}}), 4, 1, 4},
      {repeat({{0, 4}}), 2, 2, 2},
      {repeat({{0, 8}, {1, 8}}), 8, 2, 4},
      {repeat({{0, 6}, {1, 6}}), 4, 1, 2},  // 12 ranks: the world is not dp x replica
      {repeat({{0, 3}, {1, 4}}), 7, 1, 1},
      {repeat({{0, 8}, {1, 8}, {2, 8}}), 8, 3, 1},
      {{0, 1, 0, 1, 0, 1, 0, 1}, 4, 2, 1},
      {repeat({{0, 3}, {1, 5}}), 4, 2, 1},
  };
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(size_of(cases[i].node_ids, cases[i].dp, cases[i].replica), cases[i].expected) << "case " << i;
}

// tp1 x dp7 over hosts of 3 and 4: our host-map grouping shares within each
// host (groups of 3 and 4); vLLM needs equal nodes and falls back to 1.
TEST(EngramDpShardSize, UnequalHostsDifferFromOurHostMapGroups) {
  const std::vector<int> map = repeat({{0, 3}, {1, 4}});
  const NodeLocalGroups ours = compute_node_local_groups(ParallelLayout{.tp = 1, .dp = 7}, map, 2);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ours.size_by_rank[static_cast<size_t>(r)], 3) << r;
  for (int r = 3; r < 7; ++r) EXPECT_EQ(ours.size_by_rank[static_cast<size_t>(r)], 4) << r;
  EXPECT_EQ(size_of(map, 7, 1), 1);
}

// An interleaved map: we still group by host, vLLM needs contiguous ranges.
TEST(EngramDpShardSize, InterleavedMapDiffersFromOurHostMapGroups) {
  const std::vector<int> map = {0, 1, 0, 1};
  const NodeLocalGroups ours = compute_node_local_groups(ParallelLayout{.tp = 1, .dp = 4}, map, 2);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ours.size_by_rank[static_cast<size_t>(r)], 2) << r;
  EXPECT_EQ(size_of(map, 4, 1), 1);
}

TEST(EngramDpShardSize, AlignedHostsAgreeWithOurs) {
  // TP2 x DP4 on two hosts of 4: both give groups of 2.
  const std::vector<int> map = repeat({{0, 4}, {1, 4}});
  const NodeLocalGroups ours = compute_node_local_groups(ParallelLayout{.tp = 2, .dp = 4}, map, 2);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(ours.size_by_rank[static_cast<size_t>(r)], 2) << r;
  EXPECT_EQ(size_of(map, 4, 2), 2);
}

TEST(EngramDpShardSize, NodeIdsAreLabelsNotIndexes) {
  EXPECT_EQ(size_of(repeat({{7, 8}, {-3, 8}}), 8, 2), 4);
}

TEST(EngramDpShardSize, BadArgumentsAreNamed) {
  const std::vector<int> none;
  Result<int> empty = engram_dp_shard_size(none, 1, 1);
  ASSERT_FALSE(empty.is_ok());
  EXPECT_EQ(empty.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(empty.status().to_string().find("node_of_rank is empty"), std::string::npos);
  const std::vector<int> one = {0};
  Result<int> dp = engram_dp_shard_size(one, 0, 1);
  ASSERT_FALSE(dp.is_ok());
  EXPECT_NE(dp.status().to_string().find("data_parallel_size 0"), std::string::npos) << dp.status().to_string();
  Result<int> replica = engram_dp_shard_size(one, 1, 0);
  ASSERT_FALSE(replica.is_ok());
  EXPECT_NE(replica.status().to_string().find("replica_size 0"), std::string::npos) << replica.status().to_string();
}

}  // namespace
}  // namespace engram
