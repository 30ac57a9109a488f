// The handle exchange on the emulator: handle-type choice from real facts,
// data through peer pointers, and for every fault site a correct error on
// every rank (rank, peer, step) with nothing left in the ledger.
#include "core/exchange/handle_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "core/base/units.h"
#include "sim/world.h"
#include "tests/exchange_worlds.h"

namespace engram {
namespace {

using sim::FaultSite;
using sim::WorldSpec;
using ::testing::HasSubstr;

using testing::host;
using testing::one_b300_host;
using testing::two_gb300_hosts_one_domain;

// Every rank writes a pattern of its own into its slot, then reads every
// peer's through its peer pointer.
Status exchange_and_check(RankBackend& b, uint64_t bytes, std::vector<HandleType>* types) {
  ENGRAM_ASSIGN_OR_RETURN(SharedMapping m, exchange_shareable_handles(b, *b.world, bytes));
  if (types) (*types)[static_cast<size_t>(b.world_rank)] = m.handle_type();
  if (m.bytes_per_rank() != round_up(bytes, 2 * kMiB)) return internal_error("allocation not rounded to granularity");
  std::vector<std::byte> mine(64);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = std::byte(static_cast<uint8_t>(b.world_rank * 7 + i));
  ENGRAM_RETURN_IF_ERROR(b.device->copy_to_device(m.local() + 4096, mine));
  ENGRAM_RETURN_IF_ERROR(b.world->barrier());
  for (int p = 0; p < m.group_size(); ++p) {
    std::vector<std::byte> got(64);
    ENGRAM_RETURN_IF_ERROR(b.device->copy_from_device(got, m.peer(p) + 4096));
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != std::byte(static_cast<uint8_t>(m.world_rank_of(p) * 7 + i)))
        return internal_error("peer bytes differ from what the peer wrote");
  }
  return m.teardown();
}

TEST(HandleExchange, EightRanksOnOneB300HostUsePosixFds) {
  std::vector<HandleType> types(8, HandleType::kFabric);
  auto run = sim::run_world(one_b300_host(), [&](RankBackend& b) { return exchange_and_check(b, 3 * kMiB, &types); });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
  for (HandleType t : types) EXPECT_EQ(t, HandleType::kPosixFd);
}

TEST(HandleExchange, EightRanksOverTwoGb300HostsInOneDomainUseFabric) {
  std::vector<HandleType> types(8, HandleType::kPosixFd);
  auto run = sim::run_world(two_gb300_hosts_one_domain(),
                            [&](RankBackend& b) { return exchange_and_check(b, 2 * kMiB, &types); });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
  for (HandleType t : types) EXPECT_EQ(t, HandleType::kFabric);
}

TEST(HandleExchange, FabricAttributeWithoutImexFallsBackToPosixWithinAHost) {
  WorldSpec spec;
  HostSpec h = host("h200-0", 2, "H200");
  h.fabric_attribute = true;  // the attribute lies: no IMEX channel
  h.nvlink_domain = "nv18";
  spec.hosts.push_back(h);
  std::vector<HandleType> types(2, HandleType::kFabric);
  auto run = sim::run_world(spec, [&](RankBackend& b) { return exchange_and_check(b, kMiB, &types); });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_EQ(types[0], HandleType::kPosixFd);
  EXPECT_EQ(types[1], HandleType::kPosixFd);
}

TEST(HandleExchange, AcrossHostsWithoutImexFailsNamingHostsDomainsAndCapability) {
  WorldSpec spec;
  for (int i = 0; i < 2; ++i) {
    HostSpec h = host("h200-" + std::to_string(i), 2, "H200");
    h.fabric_attribute = true;
    h.nvlink_domain = "nv-pair";
    spec.hosts.push_back(h);
  }
  auto run = sim::run_world(spec, [&](RankBackend& b) { return exchange_and_check(b, kMiB, nullptr); });
  ASSERT_TRUE(run.is_ok());
  for (const Status& s : run->statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr("h200-0"));
    EXPECT_THAT(s.message(), HasSubstr("h200-1"));
    EXPECT_THAT(s.message(), HasSubstr("nv-pair"));
    EXPECT_THAT(s.message(), HasSubstr("IMEX channel"));
    EXPECT_EQ(s.context().step, "handle_type");
  }
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

TEST(HandleExchange, DifferentSizesAreRefusedNamingTheRank) {
  auto run = sim::run_world(one_b300_host(), [&](RankBackend& b) {
    return exchange_and_check(b, b.world_rank == 5 ? 4 * kMiB : 2 * kMiB, nullptr);
  });
  ASSERT_TRUE(run.is_ok());
  for (const Status& s : run->statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_EQ(s.context().peer, 5);
  }
  EXPECT_TRUE(run->leaks.empty());
}

TEST(HandleExchange, OneVisibleGpuPerContainerFailsAtAccess) {
  WorldSpec spec;
  HostSpec h = host("h200-0", 2, "H200");
  h.visible_gpus_per_rank = 1;
  spec.hosts.push_back(h);
  auto run = sim::run_world(spec, [&](RankBackend& b) { return exchange_and_check(b, kMiB, nullptr); });
  ASSERT_TRUE(run.is_ok());
  for (int r = 0; r < 2; ++r) {
    const Status& s = run->statuses[static_cast<size_t>(r)];
    EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.to_string();
    EXPECT_EQ(s.context().step, "access");
    EXPECT_EQ(s.context().peer, 1 - r);
    EXPECT_THAT(s.message(), HasSubstr("CUDA_ERROR_INVALID_DEVICE"));
  }
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

struct SiteCase {
  FaultSite site;
  const char* step;
  bool fabric;
};

class HandleExchangeFault : public ::testing::TestWithParam<SiteCase> {};

TEST_P(HandleExchangeFault, FailingRankNamesItselfPeerAndStepOthersNameItNothingLeaks) {
  const SiteCase c = GetParam();
  WorldSpec spec = c.fabric ? two_gb300_hosts_one_domain() : one_b300_host();
  const int victim = 2;
  spec.faults.plan(c.site, victim, /*occurrence=*/1);
  auto run = sim::run_world(spec, [&](RankBackend& b) { return exchange_and_check(b, 2 * kMiB, nullptr); });
  ASSERT_TRUE(run.is_ok());
  EXPECT_EQ(run->faults.fired(c.site), 1u) << run->faults.to_string();
  EXPECT_TRUE(run->faults.never_fired.empty());
  const Status& mine = run->statuses[victim];
  ASSERT_FALSE(mine.is_ok());
  EXPECT_EQ(mine.context().rank, victim) << mine.to_string();
  EXPECT_EQ(mine.context().step, c.step) << mine.to_string();
  if (c.site != FaultSite::kExport) {
    EXPECT_GE(mine.context().peer, 0) << mine.to_string();
  }
  EXPECT_THAT(mine.message(), HasSubstr("injected fault"));
  for (int r = 0; r < 8; ++r) {
    if (r == victim) continue;
    const Status& s = run->statuses[static_cast<size_t>(r)];
    EXPECT_EQ(s.code(), ErrorCode::kUnavailable) << s.to_string();
    EXPECT_EQ(s.context().rank, r);
    EXPECT_EQ(s.context().peer, victim) << s.to_string();
    EXPECT_EQ(s.context().step, c.step) << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr("rank 2 failed at step " + std::string(c.step)));
  }
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
  EXPECT_GE(run->coverage.count("exchange: cleanup after a peer's failure"), 1u);
}

INSTANTIATE_TEST_SUITE_P(Sites, HandleExchangeFault,
                         ::testing::Values(SiteCase{FaultSite::kExport, "export", false},
                                           SiteCase{FaultSite::kSend, "send", false},
                                           SiteCase{FaultSite::kImport, "import", false},
                                           SiteCase{FaultSite::kMap, "map", false},
                                           SiteCase{FaultSite::kAccess, "access", false},
                                           SiteCase{FaultSite::kExport, "export", true},
                                           SiteCase{FaultSite::kImport, "import", true},
                                           SiteCase{FaultSite::kMap, "map", true},
                                           SiteCase{FaultSite::kAccess, "access", true}),
                         [](const auto& info) {
                           return std::string(info.param.step) + (info.param.fabric ? "_fabric" : "_posix");
                         });

TEST(HandleExchange, LaterImportFailureUndoesEarlierImportsAndMaps) {
  WorldSpec spec = one_b300_host();
  spec.faults.plan(FaultSite::kImport, 4, /*occurrence=*/5);  // after four imports and maps succeeded
  auto run = sim::run_world(spec, [&](RankBackend& b) { return exchange_and_check(b, 2 * kMiB, nullptr); });
  ASSERT_TRUE(run.is_ok());
  EXPECT_EQ(run->statuses[4].context().step, "import");
  EXPECT_GE(run->coverage.count("exchange: cleanup after import failure"), 1u);
  EXPECT_GE(run->coverage.count("exchange: drained an fd after failure"), 1u);
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

TEST(HandleExchange, RankDeathMakesOthersFailNamingTheDeadRankAndLeavesNothing) {
  for (const char* at : {"import", "collective", "send", "map"}) {
    WorldSpec spec = one_b300_host();
    spec.faults.plan(FaultSite::kRankDeath, 3, 1, at);
    auto run = sim::run_world(spec, [&](RankBackend& b) { return exchange_and_check(b, 2 * kMiB, nullptr); });
    ASSERT_TRUE(run.is_ok());
    EXPECT_EQ(run->faults.fired(FaultSite::kRankDeath), 1u) << at;
    EXPECT_TRUE(run->died[3]) << at;
    EXPECT_THAT(run->statuses[3].message(), HasSubstr("died at"));
    for (int r = 0; r < 8; ++r) {
      if (r == 3) continue;
      const Status& s = run->statuses[static_cast<size_t>(r)];
      EXPECT_EQ(s.code(), ErrorCode::kUnavailable) << at << ": " << s.to_string();
      EXPECT_EQ(s.context().peer, 3) << at << ": " << s.to_string();
      EXPECT_THAT(s.message(), HasSubstr("rank 3")) << at;
    }
    EXPECT_TRUE(run->leaks.empty()) << at << ": " << sim::Ledger::format(run->leaks);
  }
}

TEST(HandleExchange, DeathDuringTeardownLeavesNothing) {
  WorldSpec spec = two_gb300_hosts_one_domain();
  // Collectives per rank before teardown: facts, export + handles, import,
  // the test's barrier; teardown's synchronizing barrier is #5.
  spec.faults.plan(FaultSite::kRankDeath, 6, 5, "collective");
  auto run = sim::run_world(spec, [&](RankBackend& b) { return exchange_and_check(b, 2 * kMiB, nullptr); });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->died[6]) << run->faults.to_string();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

TEST(HandleExchange, SameSeedSameTraceDifferentSeedsUsuallyDiffer) {
  auto hash_for = [](uint64_t seed) {
    WorldSpec spec = one_b300_host();
    spec.seed = seed;
    auto run = sim::run_world(spec, [&](RankBackend& b) { return exchange_and_check(b, 2 * kMiB, nullptr); });
    EXPECT_TRUE(run.is_ok() && run->all_ok());
    return run->trace_hash;
  };
  EXPECT_EQ(hash_for(11), hash_for(11));
  std::set<uint64_t> hashes;
  for (uint64_t seed = 1; seed <= 8; ++seed) hashes.insert(hash_for(seed));
  EXPECT_GE(hashes.size(), 7u);
}

TEST(HandleExchange, RandomFaultsNeverLeakOrHang) {
  // Seeded faults at every exchange site: whatever fires, every rank returns
  // and the ledger is empty.
  int runs_with_failures = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const WorldSpec spec = testing::random_exchange_faults(seed, 0.01, 0.002);
    auto run = sim::run_world(spec, [&](RankBackend& b) { return exchange_and_check(b, 2 * kMiB, nullptr); });
    ASSERT_TRUE(run.is_ok());
    runs_with_failures += run->all_ok() ? 0 : 1;
    EXPECT_TRUE(run->leaks.empty()) << run->summary();
    if (!run->all_ok()) {
      // Failure is all-or-nothing: no rank believes the exchange worked.
      EXPECT_EQ(run->failed_rank_count(), 8) << run->summary();
    }
  }
  EXPECT_GT(runs_with_failures, 0);
}

}  // namespace
}  // namespace engram

// The second consumer of the same exchange.
#include "core/exchange/shared_device_buffer.h"

namespace engram {
namespace {

TEST(SharedDeviceBuffer, RanksWriteTheirPartAndReadEveryPeersBoundsChecked) {
  auto run = sim::run_world(two_gb300_hosts_one_domain(), [](RankBackend& b) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(SharedDeviceBuffer buffer, SharedDeviceBuffer::create(b, *b.world, 1000));
    if (buffer.allocation_bytes() != 2 * kMiB || buffer.bytes_per_rank() != 1000) return internal_error("sizes");
    std::vector<std::byte> mine(1000, std::byte(static_cast<uint8_t>(b.world_rank + 1)));
    ENGRAM_RETURN_IF_ERROR(buffer.write(buffer.group_rank(), 0, mine));
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    std::vector<std::byte> got(1000);
    for (int p = 0; p < buffer.group_size(); ++p) {
      ENGRAM_RETURN_IF_ERROR(buffer.read(p, 0, got));
      if (got[999] != std::byte(static_cast<uint8_t>(p + 1))) return internal_error("peer part differs");
    }
    if (buffer.read(0, 990, got).code() != ErrorCode::kInvalidArgument) return internal_error("bounds not checked");
    if (buffer.read(8, 0, got).code() != ErrorCode::kInvalidArgument) return internal_error("rank not checked");
    return buffer.teardown();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty());
}

}  // namespace
}  // namespace engram
