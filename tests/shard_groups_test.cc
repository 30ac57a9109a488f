#include "core/deployment/shard_groups.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/base/size_text.h"
#include "core/base/text_list.h"
#include "core/base/units.h"

namespace engram {
namespace {

std::vector<HostSpec> hosts_with_domains(std::vector<std::string> domains) {
  std::vector<HostSpec> hosts;
  for (size_t i = 0; i < domains.size(); ++i) {
    HostSpec h;
    h.name = "h" + std::to_string(i);
    h.boot_id = "b" + std::to_string(i);
    h.gpu_count = 2;
    h.nvlink_domain = domains[i];
    hosts.push_back(h);
  }
  return hosts;
}

TEST(ShardGroups, WorldIsOneGroupIndexedByRank) {
  auto hosts = hosts_with_domains({"d", "d"});
  std::vector<int> map = {0, 0, 1, 1};
  ShardGroups g = compute_shard_groups(ShardGroup::kWorld, map, hosts);
  EXPECT_EQ(g.group_count, 1);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(g.size_by_rank[r], 4);
    EXPECT_EQ(g.index_by_rank[r], r);
  }
}

TEST(ShardGroups, NvlinkDomainsWithLoneHostsAsTheirOwnGroup) {
  auto hosts = hosts_with_domains({"d1", "", "d1", "d2"});
  std::vector<int> map = {0, 0, 1, 1, 2, 2, 3, 3};
  ShardGroups g = compute_shard_groups(ShardGroup::kNvlinkDomain, map, hosts);
  EXPECT_EQ(g.group_count, 3);
  EXPECT_EQ(g.group_by_rank[0], g.group_by_rank[4]);  // d1
  EXPECT_EQ(g.size_by_rank[0], 4);
  EXPECT_EQ(g.index_by_rank[5], 3);
  EXPECT_EQ(g.size_by_rank[2], 2);  // no domain: own group
  EXPECT_NE(g.group_by_rank[2], g.group_by_rank[6]);
}

TEST(ShardGroups, HostGroupsByIdentity) {
  // Entries 0 and 1 are two containers of one machine (same name and boot id).
  auto hosts = hosts_with_domains({"", "", ""});
  hosts[1].name = hosts[0].name;
  hosts[1].boot_id = hosts[0].boot_id;
  std::vector<int> map = {0, 1, 2, 2};
  ShardGroups g = compute_shard_groups(ShardGroup::kHost, map, hosts);
  EXPECT_EQ(g.group_count, 2);
  EXPECT_EQ(g.group_by_rank[0], g.group_by_rank[1]);
  EXPECT_EQ(g.size_by_rank[2], 2);
  EXPECT_STREQ(shard_group_name(ShardGroup::kNvlinkDomain), "nvlink_domain");
}

// A replica's TP ranks, contiguous by rank, across hosts (tp 4 over hosts of 2).
TEST(ShardGroups, ReplicaGroupsAreTpRanksWhereverTheySit) {
  auto hosts = hosts_with_domains({"d", "d", "d", "d"});
  std::vector<int> map = {0, 0, 1, 1, 2, 2, 3, 3};
  ShardGroups g = compute_shard_groups(ShardGroup::kReplica, map, hosts, /*tp=*/4);
  EXPECT_EQ(g.group_count, 2);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(g.group_by_rank[r], r / 4);
    EXPECT_EQ(g.index_by_rank[r], r % 4);
    EXPECT_EQ(g.size_by_rank[r], 4);
  }
}

// Every TP rank of the replicas of one node-local Engram DP group, numbered
// TP-major as vLLM numbers its head shards (engram_head_shard_rank =
// tp_rank x replicas + the replica's place): tp 2 x dp 4, replicas {0, 1}
// and {2, 3} grouped (each TP rank's node-local group), then every group of
// one (vLLM's fallback): each replica's TP ranks alone.
TEST(ShardGroups, EngramDpGroupsAreTpMajorOverTheNodeLocalReplicas) {
  auto hosts = hosts_with_domains({"", ""});
  const std::vector<int> map = {0, 0, 0, 0, 1, 1, 1, 1};
  NodeLocalGroups local;
  for (int r = 0; r < 8; ++r) {
    const int dp_rank = r / 2, tp_rank = r % 2;
    local.group_by_rank.push_back(dp_rank / 2 * 2 + tp_rank);
    local.size_by_rank.push_back(2);
    local.index_by_rank.push_back(dp_rank % 2);
  }
  local.group_count = 4;
  ShardGroups g = compute_shard_groups(ShardGroup::kEngramDp, map, hosts, /*tp=*/2, &local);
  EXPECT_EQ(g.group_count, 2);
  EXPECT_EQ(g.group_by_rank, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(g.size_by_rank, (std::vector<int>(8, 4)));
  EXPECT_EQ(g.index_by_rank, (std::vector<int>{0, 2, 1, 3, 0, 2, 1, 3}));

  for (int r = 0; r < 8; ++r) {
    local.group_by_rank[static_cast<size_t>(r)] = r;
    local.size_by_rank[static_cast<size_t>(r)] = 1;
    local.index_by_rank[static_cast<size_t>(r)] = 0;
  }
  g = compute_shard_groups(ShardGroup::kEngramDp, map, hosts, /*tp=*/2, &local);
  EXPECT_EQ(g.group_count, 4);
  EXPECT_EQ(g.group_by_rank, (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(g.size_by_rank, (std::vector<int>(8, 2)));
  EXPECT_EQ(g.index_by_rank, (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
}

TEST(ShardGroups, NamesAreOneTableBothWays) {
  for (ShardGroup kind : {ShardGroup::kWorld, ShardGroup::kNvlinkDomain, ShardGroup::kHost, ShardGroup::kReplica,
                          ShardGroup::kEngramDp})
    EXPECT_EQ(shard_group_from_name(shard_group_name(kind)), kind) << shard_group_name(kind);
  EXPECT_FALSE(shard_group_from_name("rack").has_value());
  EXPECT_FALSE(shard_group_from_name("").has_value());
  EXPECT_EQ(shard_group_choices(), "world, nvlink_domain, host, replica or engram_dp");
  EXPECT_STREQ(shard_group_meaning(ShardGroup::kReplica), "each DP replica's TP ranks");
}

TEST(TextList, RangesAndLimitedLists) {
  EXPECT_EQ(compress_ranges({3, 0, 1, 2, 8, 10, 11, 11}), "0-3, 8, 10-11");
  EXPECT_EQ(compress_ranges({}), "");
  std::vector<std::string> names = {"a", "b", "c", "d", "e", "f"};
  EXPECT_EQ(join_limited(names), "a, b, c, d and 2 more");
  EXPECT_EQ(join_limited(std::span(names).first(2)), "a, b");
}

TEST(SizeText, ShortForms) {
  EXPECT_EQ(format_size_short(202'758'032'400ull), "188.8 GiB");
  EXPECT_EQ(format_size_short(64 * kMiB), "64 MiB");
  EXPECT_EQ(format_size_short(190 * kGiB), "190.0 GiB");
  EXPECT_EQ(format_size_short(1536 * kKiB), "1.5 MiB");
  EXPECT_EQ(format_size_short(12), "12 B");
}

}  // namespace
}  // namespace engram
