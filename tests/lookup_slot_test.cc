// DP slot rules (docs/design.md section 4): uneven token counts, idle replicas,
// padding with DEAD, and more tokens than the slot: an error naming the rank,
// the count, the slot and the fix, never a truncation, and never a hang of
// the rank's peers.
#include <gtest/gtest.h>

#include "core/lookup/lookup_types.h"
#include "tests/lookup_test_support.h"

namespace engram {
namespace {


TableSpec tiny_table() {
  auto tiny = model_preset("tiny");
  EXPECT_TRUE(tiny.is_ok());
  return tiny->tables[0];
}

TEST(LookupSlot, OverrunIsAnErrorNamingRankCountsAndFix) {
  Status s = check_slot(70, 64, 3);
  ASSERT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.context().rank, 3);
  EXPECT_NE(s.message().find("rank 3 has 70 tokens"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("slot holds 64"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("raise tokens_per_rank_max to at least 70"), std::string::npos) << s.message();
  EXPECT_TRUE(check_slot(64, 64, 3).is_ok());
  EXPECT_TRUE(check_slot(0, 64, 3).is_ok());
}

TEST(LookupSlot, PaddingFillsTheSlotWithDead) {
  const TableSpec table = tiny_table();  // 4 heads
  std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint16_t> out(2 * 4 * 64);
  LookupRequest request{&table, ids, 3, out};
  EXPECT_EQ(pad_ids_to_slot(request, true),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, kDeadId, kDeadId, kDeadId, kDeadId}));
  EXPECT_EQ(pad_ids_to_slot(request, false), std::vector<int64_t>(12, kDeadId));
}

TEST(LookupSlot, MalformedRequestsAreNamed) {
  const TableSpec table = tiny_table();
  std::vector<int64_t> ids(6);  // not a whole number of 4-head tokens
  std::vector<uint16_t> out(6 * 64);
  EXPECT_EQ(check_request(LookupRequest{&table, ids, 4, out}, 0).code(), ErrorCode::kInvalidArgument);
  std::vector<int64_t> ids8(8);
  std::vector<uint16_t> short_out(8 * 64 - 1);
  Status s = check_request(LookupRequest{&table, ids8, 4, short_out}, 2);
  ASSERT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.context().rank, 2);
  EXPECT_NE(s.message().find("output holds"), std::string::npos);
  std::vector<uint16_t> out8(8 * 64);
  EXPECT_EQ(check_request(LookupRequest{&table, ids8, 0, out8}, 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(check_request(LookupRequest{nullptr, ids8, 4, out8}, 0).code(), ErrorCode::kInvalidArgument);
}

// Rank 1 brings 5 tokens to a slot of 4: on every placement it fails with the
// slot error and writes nothing; its peers finish with correct rows.
TEST(LookupSlot, OverrunningRankFailsAloneOnEveryPlacement) {
  const TableSpec table = tiny_table();
  const auto bytes = testing::filled_table(table, 21);
  std::vector<std::vector<int64_t>> ids = {{0, 300, 600, 900},
                                           std::vector<int64_t>(5 * 4, 10),
                                           {},
                                           {2, 400, 700, 1100, kDeadId, 401, 701, 1101}};
  for (const PlacementOps& ops : placement_registry()) {
    const Placement placement = ops.id;
    auto run = testing::run_placement(placement, table, bytes, ids, 4, 21);
    const Status& bad = run.statuses[1];
    ASSERT_EQ(bad.code(), ErrorCode::kInvalidArgument) << placement_name(placement) << ": " << bad.to_string();
    EXPECT_NE(bad.message().find("rank 1 has 5 tokens but the DP slot holds 4"), std::string::npos) << bad.message();
    for (uint16_t v : run.output[1]) ASSERT_EQ(v, testing::kUnwritten) << placement_name(placement) << " wrote a truncated result";
    for (size_t r : {size_t{0}, size_t{2}, size_t{3}}) {
      ASSERT_TRUE(run.statuses[r].is_ok()) << placement_name(placement) << " rank " << r << ": " << run.statuses[r].to_string();
      EXPECT_EQ(testing::first_difference(run.output[r], testing::direct_lookup(table, bytes, ids[r])), -1)
          << placement_name(placement) << " rank " << r;
    }
  }
}

TEST(LookupSlot, AMalformedRequestFailsAloneAndItsPeersFinish) {
  // Rank 1's ids are not a whole number of tokens (4 heads, 5 ids): it must
  // fail with invalid_argument, write nothing, and still take its part in the
  // collectives so its peers finish (not "rank 1 never arrived").
  const TableSpec table = tiny_table();
  const auto bytes = testing::filled_table(table, 22);
  std::vector<std::vector<int64_t>> ids = {{0, 300, 600, 900}, {1, 2, 3, 4, 5}, {2, 400, 700, 1100}};
  for (const PlacementOps& ops : placement_registry()) {
    const Placement placement = ops.id;
    auto run = testing::run_placement(placement, table, bytes, ids, 4, 22);
    ASSERT_EQ(run.statuses[1].code(), ErrorCode::kInvalidArgument) << placement_name(placement) << ": "
                                                                   << run.statuses[1].to_string();
    EXPECT_EQ(run.statuses[1].context().rank, 1);
    for (uint16_t v : run.output[1]) ASSERT_EQ(v, testing::kUnwritten) << placement_name(placement);
    for (size_t r : {size_t{0}, size_t{2}}) {
      ASSERT_TRUE(run.statuses[r].is_ok()) << placement_name(placement) << " rank " << r << ": " << run.statuses[r].to_string();
      EXPECT_EQ(testing::first_difference(run.output[r], testing::direct_lookup(table, bytes, ids[r])), -1)
          << placement_name(placement) << " rank " << r;
    }
  }
}

TEST(LookupSlot, IdleReplicasAndAFullSlot) {
  const TableSpec table = tiny_table();
  const auto bytes = testing::filled_table(table, 22);
  // Rank 0 idle, rank 1 exactly fills the slot of 2, rank 2 idle.
  std::vector<std::vector<int64_t>> ids = {{}, {5, 305, 605, 905, 6, 306, 606, 906}, {}};
  for (const PlacementOps& ops : placement_registry()) {
    const Placement placement = ops.id;
    auto run = testing::run_placement(placement, table, bytes, ids, 2, 22);
    for (size_t r = 0; r < 3; ++r) ASSERT_TRUE(run.statuses[r].is_ok()) << placement_name(placement) << " rank " << r;
    EXPECT_TRUE(run.output[0].empty() && run.output[2].empty());
    EXPECT_EQ(testing::first_difference(run.output[1], testing::direct_lookup(table, bytes, ids[1])), -1)
        << placement_name(placement);
  }
}

}  // namespace
}  // namespace engram
