#include "sim/sim_collectives.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/base/bf16.h"

namespace engram::sim {
namespace {

TEST(SimCollectives, AllGatherOrdersByRank) {
  auto run = run_ranks(5, 1, [](int rank, Collectives& world) -> Status {
    int64_t mine = rank * 10;
    std::vector<int64_t> all(5);
    ENGRAM_RETURN_IF_ERROR(world.all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all))));
    for (int r = 0; r < 5; ++r)
      if (all[static_cast<size_t>(r)] != r * 10) return internal_error("wrong order");
    return Status::ok();
  });
  for (const auto& s : run.statuses) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST(SimCollectives, ReduceScatterSumsAndTurnsNegativeZeroPositive) {
  auto run = run_ranks(3, 7, [](int rank, Collectives& world) -> Status {
    // Chunk c holds rank c's value at rank c and zeros elsewhere: -0 from rank 1.
    std::vector<uint16_t> in(3 * 2, 0);
    if (rank == 0) in[0] = float_to_bf16(1.5f);
    if (rank == 1) in[2] = 0x8000;  // -0
    if (rank == 2) in[5] = kBf16CanonicalNan;
    std::vector<uint16_t> out(2);
    ENGRAM_RETURN_IF_ERROR(world.reduce_scatter_sum_bf16(in, out));
    if (rank == 0 && out[0] != float_to_bf16(1.5f)) return internal_error("sum");
    if (rank == 1 && out[0] != 0x0000) return internal_error("-0 + 0 must be +0");
    if (rank == 2 && !bf16_is_nan(out[1])) return internal_error("NaN stays NaN");
    return Status::ok();
  });
  for (const auto& s : run.statuses) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST(SimCollectives, SplitAllToAllAndBarrier) {
  auto run = run_ranks(6, 3, [](int rank, Collectives& world) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(auto half, world.split(rank % 2, -rank));
    if (half->size() != 3) return internal_error("size");
    // Keys are -rank, so the highest world rank comes first.
    int expected_index = (rank % 2 == 0) ? (4 - rank) / 2 : (5 - rank) / 2;
    if (half->rank() != expected_index) return internal_error("order");
    std::vector<int32_t> send(3), receive(3);
    for (int j = 0; j < 3; ++j) send[static_cast<size_t>(j)] = rank * 100 + j;
    ENGRAM_RETURN_IF_ERROR(half->all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(receive))));
    for (int j = 0; j < 3; ++j) {
      int32_t v = receive[static_cast<size_t>(j)];
      if (v % 100 != half->rank()) return internal_error("all_to_all routing");
    }
    return world.barrier();
  });
  for (const auto& s : run.statuses) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST(SimCollectives, RankThatNeverArrivesIsNamedNotAHang) {
  auto run = run_ranks(4, 11, [](int rank, Collectives& world) -> Status {
    if (rank == 2) return Status::ok();  // leaves without joining
    return world.barrier();
  });
  EXPECT_TRUE(run.statuses[2].is_ok());
  for (int r : {0, 1, 3}) {
    const Status& s = run.statuses[static_cast<size_t>(r)];
    ASSERT_FALSE(s.is_ok());
    // After the collective's timeout, in simulated time.
    EXPECT_EQ(s.code(), ErrorCode::kDeadlineExceeded) << s.to_string();
    EXPECT_EQ(s.context().peer, 2);
    EXPECT_EQ(s.context().rank, r);
    EXPECT_EQ(s.context().step, "barrier");
  }
}

TEST(SimCollectives, SameSeedSameTraceDifferentSeedDifferentTrace) {
  auto body = [](int rank, Collectives& world) -> Status {
    for (int i = 0; i < 3; ++i) ENGRAM_RETURN_IF_ERROR(world.barrier());
    return Status::ok();
  };
  auto a = run_ranks(8, 42, body);
  auto b = run_ranks(8, 42, body);
  auto c = run_ranks(8, 43, body);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_NE(a.trace_hash, c.trace_hash);
}

TEST(SimCollectives, ManyRanksFinishQuickly) {
  auto run = run_ranks(1152, 5, [](int rank, Collectives& world) -> Status {
    int64_t mine = rank;
    std::vector<int64_t> all(1152);
    return world.all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)));
  });
  for (const auto& s : run.statuses) ASSERT_TRUE(s.is_ok()) << s.to_string();
}

}  // namespace
}  // namespace engram::sim
