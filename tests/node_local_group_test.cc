#include "core/deployment/node_local_group.h"

#include <gtest/gtest.h>

#include <vector>

namespace engram {
namespace {

ParallelLayout layout(int tp, int dp) {
  ParallelLayout l;
  l.tp = tp;
  l.dp = dp;
  return l;
}

TEST(NodeLocalGroup, AlignedHostsGroupReplicasPerTpRank) {
  // TP2 x DP4 on two hosts of 4 GPUs: replicas 0,1 on host 0, replicas 2,3 on host 1.
  std::vector<int> map = {0, 0, 0, 0, 1, 1, 1, 1};
  NodeLocalGroups g = compute_node_local_groups(layout(2, 4), map, 2);
  EXPECT_EQ(g.group_count, 4);  // (host, tp rank) pairs
  for (int r = 0; r < 8; ++r) EXPECT_EQ(g.size_by_rank[r], 2) << r;
  EXPECT_EQ(g.group_by_rank[0], g.group_by_rank[2]);  // tp 0, dp 0 and 1 on host 0
  EXPECT_EQ(g.group_by_rank[1], g.group_by_rank[3]);
  EXPECT_NE(g.group_by_rank[0], g.group_by_rank[1]);
  EXPECT_NE(g.group_by_rank[0], g.group_by_rank[4]);
  EXPECT_EQ(g.index_by_rank[0], 0);
  EXPECT_EQ(g.index_by_rank[2], 1);
  EXPECT_FALSE(g.host_misaligned[0]);
}

TEST(NodeLocalGroup, InterleavedMapStillGroupsByHost) {
  // TP1 x DP4, ranks alternate between two hosts.
  std::vector<int> map = {0, 1, 0, 1};
  NodeLocalGroups g = compute_node_local_groups(layout(1, 4), map, 2);
  EXPECT_EQ(g.group_count, 2);
  EXPECT_EQ(g.group_by_rank[0], g.group_by_rank[2]);
  EXPECT_EQ(g.group_by_rank[1], g.group_by_rank[3]);
  EXPECT_NE(g.group_by_rank[0], g.group_by_rank[1]);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(g.size_by_rank[r], 2);
  EXPECT_EQ(g.index_by_rank[3], 1);
}

TEST(NodeLocalGroup, StraddlingReplicaGivesSizeOneOnEveryHostItTouches) {
  // TP2 x DP3 on hosts of 3, 3 GPUs: replica 1 (ranks 2,3) straddles.
  std::vector<int> map = {0, 0, 0, 1, 1, 1};
  NodeLocalGroups g = compute_node_local_groups(layout(2, 3), map, 2);
  EXPECT_TRUE(g.host_misaligned[0]);
  EXPECT_TRUE(g.host_misaligned[1]);
  for (int r = 0; r < 6; ++r) EXPECT_EQ(g.size_by_rank[r], 1) << r;
  EXPECT_EQ(g.group_count, 6);
}

TEST(NodeLocalGroup, StraddleOnlyTaintsTheHostsItTouches) {
  // TP2 x DP4 on hosts of 3, 1, 4 GPUs: replica 1 (ranks 2,3) spans hosts 0
  // and 1; replicas 2 and 3 sit whole on host 2.
  std::vector<int> map = {0, 0, 0, 1, 2, 2, 2, 2};
  NodeLocalGroups g = compute_node_local_groups(layout(2, 4), map, 3);
  EXPECT_TRUE(g.host_misaligned[0]);
  EXPECT_TRUE(g.host_misaligned[1]);
  EXPECT_FALSE(g.host_misaligned[2]);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(g.size_by_rank[r], 1) << r;
  for (int r = 4; r < 8; ++r) EXPECT_EQ(g.size_by_rank[r], 2) << r;
}

TEST(NodeLocalGroup, OneReplicaPerHostIsSizeOne) {
  std::vector<int> map = {0, 0, 1, 1};
  NodeLocalGroups g = compute_node_local_groups(layout(2, 2), map, 2);
  EXPECT_FALSE(g.host_misaligned[0]);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(g.size_by_rank[r], 1);
}

TEST(NodeLocalGroup, LargeWorldIsLinear) {
  // 1,152 ranks: TP4 x DP288 over 288 hosts of 4 GPUs (one replica per host)
  // and TP1 x DP1152 (four replicas per host).
  std::vector<int> map(1152);
  for (int r = 0; r < 1152; ++r) map[r] = r / 4;
  NodeLocalGroups a = compute_node_local_groups(layout(4, 288), map, 288);
  EXPECT_EQ(a.size_by_rank[100], 1);
  NodeLocalGroups b = compute_node_local_groups(layout(1, 1152), map, 288);
  EXPECT_EQ(b.size_by_rank[100], 4);
  EXPECT_EQ(b.group_count, 288);
}

}  // namespace
}  // namespace engram
