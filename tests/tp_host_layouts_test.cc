// Host tables sliced over TP as the engines slice them: TP slices, TP-major
// Engram DP head shards, one table per node in the memory plan, and vLLM's
// Engram test matrix on the emulator (tests/real_runtime_test.cc runs the
// same matrix on real processes).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/base/size_text.h"
#include "core/base/units.h"
#include "core/lookup/tp_heads.h"
#include "core/plan/deployment_plan.h"
#include "core/placements/host_private.h"
#include "harness/emulated_scenario.h"
#include "harness/scenario.h"
#include "sim/sim_collectives.h"
#include "tests/deployment_fixtures.h"
#include "tests/lookup_test_support.h"
#include "tests/tp_matrix_emulator.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

void expect_heads(HeadRange got, int begin, int end) {
  EXPECT_EQ(got.begin, begin);
  EXPECT_EQ(got.end, end);
}

TEST(TpHeads, SlicesAreCeilSizedAndTheLastIsPadded) {
  for (int t = 0; t < 4; ++t) expect_heads(tp_head_slice(24, 4, t), 6 * t, 6 * t + 6);
  expect_heads(tp_head_slice(7, 2, 0), 0, 4);
  expect_heads(tp_head_slice(7, 2, 1), 4, 7);  // one padded head
  expect_heads(tp_head_slice(3, 4, 3), 3, 3);  // more TP ranks than heads: an empty slice
  // 7 heads over 4 shards leave one padded column on the last shard, whether
  // as TP1 x DP4 or TP2 x DP2 (vLLM's test).
  for (int tp : {1, 2}) {
    const int g = 4 / tp;
    for (int t = 0; t < tp; ++t)
      for (int i = 0; i < g; ++i) {
        const int shard = engram_head_shard_rank(t, g, i);
        EXPECT_EQ(shard, t * g + i);
        expect_heads(engram_head_shard(7, tp, t, g, i), 2 * shard, std::min(7, 2 * shard + 2));
      }
  }
  // A TP rank's Engram DP group together holds g shards: TP-major, contiguous.
  const TpHeadBlocks blocks = TpHeadBlocks::engram_dp_groups(10, 2, 4);
  EXPECT_EQ(blocks.block_width(), 8);
  expect_heads(blocks.block(0), 0, 8);
  expect_heads(blocks.block(1), 8, 10);
  EXPECT_EQ(blocks.block_of_head(9), 1);
}

TEST(TpHeads, RowsOfEveryBlockAreFoundByRow) {
  auto spec = make_model_spec("seven", 100, {1}, {2}, 7, RowFormat::kBf16, 8, 3);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  const TableSpec& table = spec->tables[0];
  const TpHeadBlocks blocks = TpHeadBlocks::tp_slices(7, 4);  // [0,2) [2,4) [4,6) [6,7)
  const std::vector<int64_t> bounds = blocks.row_bounds(table);
  for (int h = 0; h < 7; ++h) {
    EXPECT_EQ(TpHeadBlocks::block_of_row(bounds, table.head_offset(h)), h / 2) << h;
    EXPECT_EQ(TpHeadBlocks::block_of_row(bounds, table.head_offset(h + 1) - 1), h / 2) << h;
  }
  EXPECT_EQ(TpHeadBlocks::block_of_row(bounds, -1), -1);
  EXPECT_EQ(TpHeadBlocks::block_of_row(bounds, table.row_count()), -1);
}

// `engramlab plan --cpu-offload --tp T --dp D --gpus-per-host 4 --shm-size S`.
PlanResult plan_of(int tp, int dp, uint64_t shm_bytes) {
  Deployment d = testing::deployment(1, 4, tp, dp, shm_bytes);
  d.config.cpu_offload = true;
  WarningSink sink;
  auto plan = plan_deployment(d, sink);
  EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
  return std::move(plan).value();
}

void expect_one_table_per_node_and_a_quarter_per_rank(const PlanResult& plan, Placement placement) {
  ASSERT_EQ(plan.hosts.size(), 1u);
  EXPECT_EQ(plan.hosts[0].table_copies, 1);
  EXPECT_EQ(plan.hosts[0].host_table_bytes, testing::kFlashTableBytesTotal);
  uint64_t sum = 0;
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(r.placement, placement);
    EXPECT_EQ(format_size_short(r.memory.host_private_bytes), "47.2 GiB") << r.rank;
    sum += r.memory.host_private_bytes;
  }
  EXPECT_EQ(sum, testing::kFlashTableBytesTotal);
}

TEST(TpHostLayouts, Tp4PrivateHoldsOneTablePerNodeIn47GiBSlices) {
  const PlanResult plan = plan_of(4, 1, 190 * kGiB);
  expect_one_table_per_node_and_a_quarter_per_rank(plan, Placement::kHostPrivate);
}

TEST(TpHostLayouts, Tp2Dp2HeadShardedHoldsOneTablePerNodeIn47GiBShards) {
  const PlanResult plan = plan_of(2, 2, 64 * kMiB);
  expect_one_table_per_node_and_a_quarter_per_rank(plan, Placement::kHostHeadSharded);
}

TEST(TpHostLayouts, Tp2Dp2SharedMapsItsSliceOfTheNodesOneCopy) {
  const PlanResult plan = plan_of(2, 2, 190 * kGiB);
  ASSERT_EQ(plan.hosts.size(), 1u);
  EXPECT_EQ(plan.hosts[0].table_copies, 1);
  EXPECT_EQ(plan.hosts[0].shm_bytes, testing::kFlashTableBytesTotal);
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(r.placement, Placement::kHostShared);
    EXPECT_EQ(r.memory.host_private_bytes, 0u);
    EXPECT_EQ(format_size_short(r.memory.host_shared_mapped_bytes), "94.4 GiB") << r.rank;
  }
}

TEST(TpHostLayouts, Tp2Dp2PrivateIsOneTablePerReplica) {
  Deployment d = testing::deployment(1, 4, 2, 2, 190 * kGiB);
  d.config.cpu_offload = true;
  d.config.dp_shared_memory = false;
  WarningSink sink;
  auto plan = plan_deployment(d, sink);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->hosts[0].table_copies, 2);
  EXPECT_EQ(plan->hosts[0].host_table_bytes, 2 * testing::kFlashTableBytesTotal);
}

// vLLM asserts: get_engram_dp_group().ranks == [tp_rank + replica * tp_size
// for replica in range(dp_size)] and engram_head_shard_rank() == tp_rank *
// dp_size + dp_rank.
TEST(TpHostLayouts, EngramDpGroupsAndHeadShardOrderAreVllms) {
  for (auto [tp, dp] : {std::pair{1, 4}, std::pair{2, 2}}) {
    const PlanResult plan = plan_of(tp, dp, 64 * kMiB);
    for (const RankPlan& r : plan.ranks) {
      ASSERT_EQ(r.placement, Placement::kHostHeadSharded);
      EXPECT_EQ(r.tp_rank, r.rank % tp);
      EXPECT_EQ(r.dp_rank, r.rank / tp);
      std::vector<int> members;
      for (const RankPlan& other : plan.ranks)
        if (other.node_local_group == r.node_local_group) members.push_back(other.rank);
      std::vector<int> want;
      for (int replica = 0; replica < dp; ++replica) want.push_back(r.tp_rank + replica * tp);
      EXPECT_EQ(members, want) << "rank " << r.rank;
      EXPECT_EQ(r.node_local_group_size, dp);
      EXPECT_EQ(r.node_local_index, r.dp_rank);
      EXPECT_EQ(engram_head_shard_rank(r.tp_rank, r.node_local_group_size, r.node_local_index),
                r.tp_rank * dp + r.dp_rank);
    }
  }
}

TEST(TpHostLayouts, SequenceParallelAtTp1IsRefusedNamingTheFieldAndTheFix) {
  Deployment d = testing::deployment(1, 4, 1, 4, 190 * kGiB);
  d.config.cpu_offload = true;
  d.config.sequence_parallel = true;
  WarningSink sink;
  auto plan = plan_deployment(d, sink);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              AllOf(HasSubstr("config.sequence_parallel: true"), HasSubstr("layout.tp is 1"),
                    HasSubstr("sequence_parallel: false"), HasSubstr("raise tp")));
}

// TP ranks of one replica must bring the same ids: every member fails the
// step, naming the peer, instead of trading mismatched buffers.
TEST(TpHostLayouts, TpRanksWithDifferentIdsFailTheStepAlike) {
  auto tiny = model_preset("tiny-8h");
  ASSERT_TRUE(tiny.is_ok());
  const TableSpec& table = tiny->tables[0];
  const auto bytes = testing::filled_table(table, 2);
  auto run = sim::run_ranks(2, 5, [&](int rank, Collectives& world) -> Status {
    const RowRange rows = rows_of_heads(table, tp_head_slice(table.head_count(), 2, rank));
    const auto slice = std::span(bytes).subspan(static_cast<size_t>(rows.first_row) * table.row_bytes(),
                                                static_cast<size_t>(rows.row_count) * table.row_bytes());
    std::vector<int64_t> ids(static_cast<size_t>(table.head_count()) * (rank + 1), kDeadId);
    std::vector<uint16_t> out(ids.size() * static_cast<size_t>(table.dim));
    Status s = lookup_host_private(world, LookupRequest{&table, ids, 4, out}, slice);
    if (s.code() != ErrorCode::kFailedPrecondition || s.message().find("different ids") == std::string::npos ||
        s.context().peer != 1 - rank)
      return internal_error("rank " + std::to_string(rank) + ": " + s.to_string());
    return Status::ok();
  });
  for (const Status& s : run.statuses) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST(TpHostLayouts, VllmMatrixOnTheEmulator) {
  const auto cases = testing::tp_matrix_cases();
  ASSERT_EQ(cases.size(), 18u);
  testing::run_tp_matrix_on_emulator(cases);
}

}  // namespace
}  // namespace engram
