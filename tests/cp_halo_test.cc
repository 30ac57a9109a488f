// Context-parallel prefill's halo exchange (core/lookup/cp_halo.h) on the
// emulator: every split of a chunk into cp 2 and cp 4 shards (empty ones and
// ones shorter than the n-1 lookback included, so a halo spans several
// earlier ranks), random cuts, the CP groups a layout forms, the device
// path (DeviceCollectives::all_gather), and a halo that never arrives (a CP
// rank dead, hung or late past the collective deadline): deadline_exceeded
// naming the rank. The same over TCP between processes: tests/cp_halo_tcp_test.cc.
#include "core/lookup/cp_halo.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/base/splitmix64.h"
#include "core/deployment/cp_groups.h"
#include "core/model/table_spec.h"
#include "sim/sim_collectives.h"
#include "sim/world.h"
#include "tests/cp_halo_cases.h"

namespace engram {
namespace {

using ::testing::HasSubstr;
using cp_cases::check_every_split;
using cp_cases::check_random_cuts;
using cp_cases::v41_hashers;

// A group's halo exchange as a function the case helpers call.
cp_cases::Exchange host_exchange(Collectives& group, std::vector<int> members) {
  return [&group, members](int halo_length, std::span<const int64_t> shard) {
    return exchange_cp_halo(group, members, halo_length, shard);
  };
}

std::vector<int> iota_ranks(int n) {
  std::vector<int> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

TEST(CpHalo, EveryOffsetAtCp2AndCp4GivesTheWholeSequencesIds) {
  for (const auto& [cp, longest] : {std::pair{2, 12}, std::pair{4, 8}}) {
    auto run = sim::run_ranks(cp, 7, [&, cp, longest](int rank, Collectives& world) -> Status {
      return check_every_split(host_exchange(world, iota_ranks(cp)), rank, cp, longest, v41_hashers());
    });
    for (int r = 0; r < cp; ++r)
      EXPECT_TRUE(run.statuses[static_cast<size_t>(r)].is_ok())
          << "cp " << cp << ", rank " << r << ": " << run.statuses[static_cast<size_t>(r)].to_string();
  }
}

TEST(CpHalo, RandomCutsGiveTheWholeSequencesIds) {
  for (int cp : {2, 3, 4}) {
    auto run = sim::run_ranks(cp, 11, [&, cp](int rank, Collectives& world) -> Status {
      return check_random_cuts(host_exchange(world, iota_ranks(cp)), rank, cp, /*cuts=*/200, /*seed=*/cp * 101,
                               v41_hashers());
    });
    for (int r = 0; r < cp; ++r)
      EXPECT_TRUE(run.statuses[static_cast<size_t>(r)].is_ok())
          << "cp " << cp << ", rank " << r << ": " << run.statuses[static_cast<size_t>(r)].to_string();
  }
}

TEST(CpHalo, ALookbackSpansSeveralShortShardsAndStopsAtADeadToken) {
  // Shards [a], [], [b], [c d] after a prefix [p q DEAD r]: CP rank 3's
  // lookback is [a b] plus r from the prefix, not just CP rank 2's shard.
  const int64_t a = 11, b = 12, c = 13, d = 14, p = 5, q = 6, r = 7;
  const std::vector<std::vector<int64_t>> shards = {{a}, {}, {b}, {c, d}};
  auto run = sim::run_ranks(4, 3, [&](int rank, Collectives& world) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(CpHalo halo, exchange_cp_halo(world, iota_ranks(4), 3, shards[static_cast<size_t>(rank)]));
    const std::vector<int64_t> prefix = {p, q, kDeadId, r};
    const std::vector<std::vector<int64_t>> want = {{q, kDeadId, r}, {kDeadId, r, a}, {kDeadId, r, a}, {r, a, b}};
    if (halo.lookback_before(rank, prefix) != want[static_cast<size_t>(rank)])
      return internal_error(fmt::format("rank {}: lookback [{}]", rank, fmt::join(halo.lookback_before(rank, prefix), ", ")));
    if (halo.lookback_after_chunk(prefix) != std::vector<int64_t>{b, c, d})
      return internal_error("lookback after the chunk");
    if (halo.shard_offset(rank) != std::vector<int64_t>{0, 1, 1, 2}[static_cast<size_t>(rank)] || halo.chunk_tokens() != 4)
      return internal_error("offsets");
    return Status::ok();
  });
  for (int rk = 0; rk < 4; ++rk)
    EXPECT_TRUE(run.statuses[static_cast<size_t>(rk)].is_ok()) << run.statuses[static_cast<size_t>(rk)].to_string();
}

TEST(CpGroups, ConsecutiveReplicasAtOneTpRankFormAGroup) {
  const ParallelLayout layout{.tp = 2, .dp = 4, .prefill_cp = 2};
  ASSERT_TRUE(check_prefill_cp(layout).is_ok());
  EXPECT_EQ(cp_group_count(layout), 4);
  // Rank = replica * tp + tp rank; replicas {0, 1} and {2, 3} form groups.
  const std::vector<std::vector<int>> members = {{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}};
  for (int r = 0; r < 8; ++r) {
    const CpGroup g = cp_group_of(layout, r);
    EXPECT_EQ(g.world_ranks, members[static_cast<size_t>(r)]) << "rank " << r;
    EXPECT_EQ(g.cp_rank, (r / 2) % 2) << "rank " << r;
    EXPECT_EQ(g.index, (r / 4) * 2 + r % 2) << "rank " << r;
  }
  const CpGroup alone = cp_group_of(ParallelLayout{.tp = 4, .dp = 2}, 5);
  EXPECT_EQ(alone.world_ranks, std::vector<int>{5});
  EXPECT_EQ(alone.cp_rank, 0);

  const Status bad = check_prefill_cp(ParallelLayout{.tp = 1, .dp = 6, .prefill_cp = 4});
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("layout.prefill_cp: 4 does not divide layout.dp = 6"));
  EXPECT_THAT(bad.message(), HasSubstr("(1, 2, 3, 6)"));

  // Split by the layout, each group exchanges its own halos.
  auto run = sim::run_ranks(8, 5, [&](int rank, Collectives& world) -> Status {
    const CpGroup g = cp_group_of(layout, rank);
    ENGRAM_ASSIGN_OR_RETURN(auto group, world.split(g.index, g.cp_rank));
    const std::vector<int64_t> shard(static_cast<size_t>(rank % 3), 100 + rank);
    ENGRAM_ASSIGN_OR_RETURN(CpHalo halo, exchange_cp_halo(*group, g.world_ranks, 3, shard));
    for (int k = 0; k < 2; ++k)
      if (halo.shard_tokens(k) != g.world_ranks[static_cast<size_t>(k)] % 3)
        return internal_error(fmt::format("rank {}: member {} reported {} tokens", rank, k, halo.shard_tokens(k)));
    return Status::ok();
  });
  for (int r = 0; r < 8; ++r)
    EXPECT_TRUE(run.statuses[static_cast<size_t>(r)].is_ok()) << run.statuses[static_cast<size_t>(r)].to_string();
}

TEST(CpHalo, WrongMembersOrHaloLengthsAreNamed) {
  auto run = sim::run_ranks(2, 1, [&](int rank, Collectives& world) -> Status {
    const std::vector<int64_t> shard = {1, 2};
    auto swapped = exchange_cp_halo(world, std::vector<int>{1, 0}, 3, shard);
    if (swapped.is_ok() || swapped.status().code() != ErrorCode::kInvalidArgument ||
        swapped.status().message().find("member_world_ranks is [1, 0]") == std::string::npos)
      return internal_error("swapped members: " + swapped.status().to_string());
    // Members that disagree on the lookback: each names the other.
    auto uneven = exchange_cp_halo(world, iota_ranks(2), 2 + rank, shard);
    if (uneven.is_ok() || uneven.status().code() != ErrorCode::kInvalidArgument ||
        uneven.status().message().find("every member must pass the same halo_length") == std::string::npos)
      return internal_error("uneven halo lengths: " + uneven.status().to_string());
    return Status::ok();
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(run.statuses[static_cast<size_t>(r)].is_ok()) << run.statuses[static_cast<size_t>(r)].to_string();
}

sim::WorldSpec four_gpus() {
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("h200-", 1, 4, "H200");
  spec.timeouts.collective_us = 30'000'000;
  return spec;
}

TEST(CpHalo, TheDeviceExchangeGivesTheSameIdsAtEveryOffset) {
  auto run = sim::run_world(four_gpus(), [](RankBackend& b) -> Status {
    const int halo_length = cp_halo_length(v41_hashers());
    {
      ENGRAM_ASSIGN_OR_RETURN(auto device_group, b.compute->connect(*b.world));
      ENGRAM_ASSIGN_OR_RETURN(auto x, DeviceCpHaloExchange::create(*b.compute, *device_group, iota_ranks(4),
                                                                   b.world_rank, halo_length));
      auto exchange = [&x](int, std::span<const int64_t> shard) { return x.exchange(shard, StreamRef{}); };
      ENGRAM_RETURN_IF_ERROR(check_every_split(exchange, b.world_rank, 4, 6, v41_hashers()));
      ENGRAM_RETURN_IF_ERROR(x.close());
    }
    // cp 2: two groups of the world.
    ENGRAM_ASSIGN_OR_RETURN(auto pair, b.world->split(b.world_rank / 2, b.world_rank % 2));
    ENGRAM_ASSIGN_OR_RETURN(auto device_pair, b.compute->connect(*pair));
    const std::vector<int> members = {b.world_rank / 2 * 2, b.world_rank / 2 * 2 + 1};
    ENGRAM_ASSIGN_OR_RETURN(auto x, DeviceCpHaloExchange::create(*b.compute, *device_pair, members, b.world_rank,
                                                                 halo_length));
    auto exchange = [&x](int, std::span<const int64_t> shard) { return x.exchange(shard, StreamRef{}); };
    return check_every_split(exchange, pair->rank(), 2, 9, v41_hashers());  // x's destructor frees its buffers
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << run->summary();
}

struct MissingHalo {
  const char* what;
  sim::FaultSite site;
  uint64_t delay_us;
};

void expect_peers_name(const sim::WorldRun& run, int missing, bool missing_rank_reports_itself) {
  for (int r = 0; r < 4; ++r) {
    const Status& s = run.statuses[static_cast<size_t>(r)];
    if (r == missing && !missing_rank_reports_itself) continue;
    EXPECT_EQ(s.code(), ErrorCode::kDeadlineExceeded) << "rank " << r << ": " << s.to_string();
    EXPECT_EQ(s.context().peer, missing) << "rank " << r << ": " << s.to_string();
    EXPECT_EQ(s.context().rank, r) << s.to_string();
    EXPECT_EQ(s.context().step, "cp_halo") << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr(fmt::format("CP rank {} (world rank {}) did not send its halo", missing, missing)));
  }
}

TEST(CpHalo, AHaloThatNeverArrivesIsDeadlineExceededNamingTheRank) {
  for (const MissingHalo& m : {MissingHalo{"dies", sim::FaultSite::kRankDeath, 0},
                               MissingHalo{"hangs", sim::FaultSite::kHang, 0},
                               MissingHalo{"is late", sim::FaultSite::kSlow, 45'000'000}}) {
    SCOPED_TRACE(m.what);
    sim::WorldSpec spec = four_gpus();
    spec.faults.plan(m.site, 2, /*occurrence=*/1, "collective", m.delay_us);
    auto run = sim::run_world(spec, [](RankBackend& b) -> Status {
      const std::vector<int64_t> shard(static_cast<size_t>(b.world_rank), 9);
      return exchange_cp_halo(*b.world, iota_ranks(4), 3, shard).status();
    });
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    // A late rank finds its group aborted by the peers that gave up on it:
    // its own error names it too.
    expect_peers_name(*run, 2, m.site == sim::FaultSite::kSlow);
    EXPECT_TRUE(run->leaks.empty()) << run->summary();
    EXPECT_TRUE(run->live()) << run->liveness_text();
  }
}

TEST(CpHalo, ADeviceHaloThatNeverArrivesIsDeadlineExceededNamingTheRank) {
  sim::WorldSpec spec = four_gpus();
  spec.faults.plan(sim::FaultSite::kRankDeath, 1, /*occurrence=*/2, "collective");  // 1: connect's barrier
  auto run = sim::run_world(spec, [](RankBackend& b) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(auto device_group, b.compute->connect(*b.world));
    ENGRAM_ASSIGN_OR_RETURN(auto x, DeviceCpHaloExchange::create(*b.compute, *device_group, iota_ranks(4),
                                                                 b.world_rank, 3));
    const std::vector<int64_t> shard = {4, 5};
    return x.exchange(shard, StreamRef{}).status();
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_TRUE(run->died[1]);
  expect_peers_name(*run, 1, false);
  EXPECT_TRUE(run->leaks.empty()) << run->summary();
}

}  // namespace
}  // namespace engram
