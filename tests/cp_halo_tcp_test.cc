// Context-parallel prefill's halo exchange (core/lookup/cp_halo.h) between
// real processes over the TCP host collectives: every split at cp 4 (the
// world) and cp 2 (the world split into the CP groups a layout forms),
// random cuts, and a halo that never arrives (a CP rank killed, or later
// than op_timeout): deadline_exceeded naming the rank. The emulator's
// twin: tests/cp_halo_test.cc.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "core/deployment/cp_groups.h"
#include "core/lookup/cp_halo.h"
#include "tests/cp_halo_cases.h"
#include "tests/forked_tcp_ranks.h"

namespace engram {
namespace {

using namespace std::chrono_literals;
using cp_cases::v41_hashers;

int report(int rank, const Status& s) {
  if (s.is_ok()) return 0;
  std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
  return 1;
}

TEST(CpHaloTcp, EverySplitAtCp4AndCp2GivesTheWholeSequencesIds) {
  const auto codes = testing::run_forked_tcp_ranks(4, 10000ms, [](int rank, Collectives& world) -> int {
    const std::vector<int> all = {0, 1, 2, 3};
    cp_cases::Exchange over_world = [&](int halo_length, std::span<const int64_t> shard) {
      return exchange_cp_halo(world, all, halo_length, shard);
    };
    Status s = cp_cases::check_every_split(over_world, rank, 4, 6, v41_hashers());
    if (s.is_ok()) s = cp_cases::check_random_cuts(over_world, rank, 4, 50, 17, v41_hashers());
    if (!s.is_ok()) return report(rank, s);
    // prefill_cp 2 over dp 4: CP groups {0, 1} and {2, 3}.
    const CpGroup g = cp_group_of(ParallelLayout{.tp = 1, .dp = 4, .prefill_cp = 2}, rank);
    auto group = world.split(g.index, g.cp_rank);
    if (!group.is_ok()) return report(rank, group.status());
    cp_cases::Exchange over_group = [&](int halo_length, std::span<const int64_t> shard) {
      return exchange_cp_halo(**group, g.world_ranks, halo_length, shard);
    };
    return report(rank, cp_cases::check_every_split(over_group, g.cp_rank, 2, 10, v41_hashers()));
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank " << r;
}

// Exit 0 when the exchange failed with deadline_exceeded naming `missing`.
int expect_missing_named(int rank, Collectives& world, int missing, std::chrono::milliseconds within) {
  const std::vector<int> all = {0, 1, 2, 3};
  const std::vector<int64_t> shard(static_cast<size_t>(rank), 7);
  const auto start = std::chrono::steady_clock::now();
  auto halo = exchange_cp_halo(world, all, 3, shard);
  const auto took = std::chrono::steady_clock::now() - start;
  const Status& s = halo.status();
  std::fprintf(stderr, "rank %d: %s\n", rank, halo.is_ok() ? "ok" : s.to_string().c_str());
  const std::string named = "CP rank " + std::to_string(missing) + " (world rank " + std::to_string(missing) +
                            ") did not send its halo";
  const bool right = !halo.is_ok() && s.code() == ErrorCode::kDeadlineExceeded && s.context().peer == missing &&
                     s.context().rank == rank && s.context().step == "cp_halo" &&
                     s.message().find(named) != std::string::npos;
  if (!right) return 1;
  return took < within ? 0 : 2;
}

TEST(CpHaloTcp, AKilledCpRankIsDeadlineExceededNamingIt) {
  const auto codes = testing::run_forked_tcp_ranks(4, 10000ms, [](int rank, Collectives& world) -> int {
    if (rank == 2) ::raise(SIGKILL);  // joined, then gone before it sends its halo
    return expect_missing_named(rank, world, 2, 5s);  // at once, not after op_timeout
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], r == 2 ? 100 + SIGKILL : 0) << "rank " << r;
}

TEST(CpHaloTcp, ACpRankLaterThanTheDeadlineIsNamedByEveryMember) {
  const auto codes = testing::run_forked_tcp_ranks(4, 1500ms, [](int rank, Collectives& world) -> int {
    if (rank == 1) std::this_thread::sleep_for(3500ms);  // past op_timeout (its peers give up at 1.5 s)
    // The late rank finds the round its peers gave up on: named too.
    return expect_missing_named(rank, world, 1, 5s);
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank " << r;
}

}  // namespace
}  // namespace engram
