// The world driver: spec checks, deterministic traces, the fault report
// (what fired, what never did), rank death through collectives, the
// reproduction line, and the rack topology at 1,152 ranks.
#include "sim/world.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/base/rerun_command.h"
#include "core/exchange/handle_exchange.h"
#include "core/base/units.h"
#include "tests/engramlab_rerun_suites.h"

namespace engram::sim {
namespace {

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
// Reproduction lines name the built engramlab, not this test binary.
[[maybe_unused]] const bool kRerunLinesNameEngramlab = testing::rerun_lines_name_engramlab("World");

using ::testing::HasSubstr;

WorldSpec small_world() {
  WorldSpec spec;
  spec.hosts = plain_hosts("node-", 2, 2, "H200");
  return spec;
}

WorldSpec one_host_four_gpus() {
  WorldSpec spec;
  spec.hosts = plain_hosts("node-", 1, 4, "H200");
  return spec;
}

Status two_barriers(RankBackend& b) {
  ENGRAM_RETURN_IF_ERROR(b.world->barrier());
  return b.world->barrier();
}

TEST(World, MalformedSpecsAreInvalidArguments) {
  WorldSpec none;
  EXPECT_EQ(run_world(none, two_barriers).status().code(), ErrorCode::kInvalidArgument);
  WorldSpec bad_gpu = small_world();
  bad_gpu.ranks = {{0, 0}, {1, 2}};
  auto r = run_world(bad_gpu, two_barriers);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("gpu 2 of host node-1"));
  WorldSpec bad_fault = small_world();
  bad_fault.faults.plan(FaultSite::kMap, 9);
  EXPECT_THAT(run_world(bad_fault, two_barriers).status().message(), HasSubstr("rank 9"));
  WorldSpec bad_model = small_world();
  bad_model.hosts[0].gpu_model = "Z9000";
  EXPECT_FALSE(run_world(bad_model, two_barriers).is_ok());
}

TEST(World, DefaultsFillBootIdsMemoryAndOneRankPerGpu) {
  auto spec = complete_world_spec(small_world());
  ASSERT_TRUE(spec.is_ok());
  EXPECT_EQ(spec->ranks.size(), 4u);
  EXPECT_EQ(spec->hosts[1].boot_id, "boot-node-1");
  EXPECT_GT(spec->hosts[0].gpu_memory_bytes, 100 * kGiB);
  EXPECT_EQ(spec->reproduction, kEngramlab + " fuzz --seed 1 --seeds 1");
}

TEST(World, SameSeedSameTraceTextDifferentSeedDifferentTrace) {
  auto trace = [](uint64_t seed) {
    WorldSpec spec = small_world();
    spec.seed = seed;
    spec.keep_trace_text = true;
    auto run = run_world(spec, two_barriers);
    EXPECT_TRUE(run.is_ok() && run->all_ok());
    return std::make_pair(run->trace_hash, run->trace_text);
  };
  auto a = trace(5), b = trace(5), c = trace(6);
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a.second.empty());
  EXPECT_NE(a.first, c.first);
}

TEST(World, FaultReportShowsSitesThatNeverFiredAndPlansNeverReached) {
  WorldSpec spec = one_host_four_gpus();
  spec.faults.plan(FaultSite::kImport, 1, /*occurrence=*/50);  // the exchange imports only 3 times
  spec.faults.plan(FaultSite::kMap, 2, 1);
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(SharedMapping m, exchange_shareable_handles(b, *b.world, 2 * kMiB));
    return m.teardown();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_EQ(run->faults.fired(FaultSite::kMap), 1u);
  EXPECT_EQ(run->faults.fired(FaultSite::kImport), 0u);
  EXPECT_GT(run->faults.reached(FaultSite::kImport), 0u);
  ASSERT_EQ(run->faults.never_fired.size(), 1u);
  EXPECT_EQ(run->faults.never_fired[0].site, FaultSite::kImport);
  const std::string table = run->faults.to_string();
  EXPECT_THAT(table, HasSubstr("never fired"));
  EXPECT_THAT(table, HasSubstr("planned but never reached: import rank 1 #50"));
  EXPECT_EQ(run->faults.fired_events, std::vector<std::string>{"rank 2 map #1"});
  EXPECT_TRUE(run->leaks.empty());
}

TEST(World, ADeadRankFailsEveryCollectiveWaitingOnIt) {
  WorldSpec spec = small_world();
  spec.faults.plan(FaultSite::kRankDeath, 3, 2, "collective");
  spec.reproduction = "engramlab scenario run deaths.yaml --seed 1";
  auto run = run_world(spec, two_barriers);
  ASSERT_TRUE(run.is_ok());
  EXPECT_EQ(run->died, (std::vector<bool>{false, false, false, true}));
  EXPECT_THAT(run->statuses[3].message(), HasSubstr("died at collective"));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(run->statuses[static_cast<size_t>(r)].code(), ErrorCode::kUnavailable);
    EXPECT_EQ(run->statuses[static_cast<size_t>(r)].context().peer, 3);
  }
  EXPECT_THAT(run->summary(), HasSubstr("reproduce: engramlab scenario run deaths.yaml --seed 1"));
  EXPECT_THAT(run->summary(), HasSubstr("4 of 4 ranks failed"));
}

TEST(World, ProbabilisticFaultsFollowTheSeed) {
  auto fired = [](uint64_t seed) {
    WorldSpec spec = one_host_four_gpus();
    spec.seed = seed;
    spec.faults.with_rate(FaultSite::kMap, 0.3);
    auto run = run_world(spec, [](RankBackend& b) -> Status {
      auto m = exchange_shareable_handles(b, *b.world, 2 * kMiB);
      return m.is_ok() ? m->teardown() : m.status();
    });
    EXPECT_TRUE(run.is_ok() && run->leaks.empty());
    return run->faults.fired_events;
  };
  EXPECT_EQ(fired(3), fired(3));
  bool any = false;
  for (uint64_t s = 1; s < 10; ++s) any |= !fired(s).empty();
  EXPECT_TRUE(any);
}

TEST(World, SixteenNvl72RacksGive1152RanksInSixteenImexDomains) {
  auto hosts = gb300_nvl72_racks(16);
  EXPECT_EQ(hosts.size(), 288u);
  EXPECT_EQ(ranks_filling_gpus(hosts).size(), 1152u);
  EXPECT_EQ(hosts[17].nvlink_domain, "nvl72-rack0");
  EXPECT_EQ(hosts[18].nvlink_domain, "nvl72-rack1");
  EXPECT_TRUE(hosts[200].imex_channel && hosts[200].fabric_attribute);
}

TEST(World, FourRacksExchangeWithinEachDomainOverFabric) {
  WorldSpec spec;
  spec.hosts = gb300_nvl72_racks(4);
  std::vector<int> group_sizes(288, 0);
  auto run = run_world(spec, [&](RankBackend& b) -> Status {
    const int rack = b.world_rank / 72;
    ENGRAM_ASSIGN_OR_RETURN(auto domain, b.world->split(rack, b.world_rank));
    ENGRAM_ASSIGN_OR_RETURN(SharedMapping m, exchange_shareable_handles(b, *domain, 2600 * kMiB));
    if (m.handle_type() != HandleType::kFabric) return internal_error("not FABRIC");
    group_sizes[static_cast<size_t>(b.world_rank)] = m.group_size();
    return m.teardown();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty());
  for (int size : group_sizes) EXPECT_EQ(size, 72);
}

TEST(World, ExchangeAcrossTwoRacksIsRefusedNamingBothDomains) {
  WorldSpec spec;
  spec.hosts = gb300_nvl72_racks(2);
  spec.ranks = {{0, 0}, {0, 1}, {18, 0}, {18, 1}};  // two ranks in each rack
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    auto m = exchange_shareable_handles(b, *b.world, 2 * kMiB);
    return m.is_ok() ? internal_error("exchanged across IMEX domains") : m.status();
  });
  ASSERT_TRUE(run.is_ok());
  for (const Status& s : run->statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("nvl72-rack0"));
    EXPECT_THAT(s.message(), HasSubstr("nvl72-rack1"));
  }
  EXPECT_TRUE(run->leaks.empty());
}

}  // namespace
}  // namespace engram::sim
