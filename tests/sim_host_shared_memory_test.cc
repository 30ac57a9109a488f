// Emulated /dev/shm: bounded by the host's tmpfs total, one namespace per
// host identity, missing where not mounted, and faults that leave no
// half-made segment behind.
#include "sim/sim_host_shared_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "core/base/units.h"
#include "sim/world.h"

namespace engram::sim {
namespace {

using ::testing::HasSubstr;

HostSpec host(std::string name, int gpus, uint64_t tmpfs_bytes, bool mounted = true) {
  HostSpec h;
  h.name = std::move(name);
  h.gpu_count = gpus;
  h.tmpfs_bytes_total = tmpfs_bytes;
  h.shm_mounted = mounted;
  return h;
}

TEST(SimHostSharedMemory, DockerDefault64MiBGivesEnospcNamingTheSizes) {
  WorldSpec spec;
  spec.hosts = {host("docker-0", 1, 64 * kMiB)};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    auto big = b.shm->create("engram-table", 100 * kMiB);
    if (big.is_ok()) return internal_error("a 100 MiB segment fit in 64 MiB");
    return big.status();
  });
  ASSERT_TRUE(run.is_ok());
  const Status& s = run->statuses[0];
  EXPECT_EQ(s.code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("ENOSPC"));
  EXPECT_THAT(s.message(), HasSubstr("64.0 MiB"));
  EXPECT_THAT(s.message(), HasSubstr("--shm-size"));
  EXPECT_TRUE(run->leaks.empty());
}

TEST(SimHostSharedMemory, SpaceIsSharedByTheHostAndReturnsWhenTheLastMappingGoes) {
  WorldSpec spec;
  spec.hosts = {host("h", 2, 64 * kMiB)};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    if (b.world_rank == 0) {
      ENGRAM_ASSIGN_OR_RETURN(auto first, b.shm->create("a", 40 * kMiB));
      ENGRAM_RETURN_IF_ERROR(b.world->barrier());  // rank 1 tries its 40 MiB now
      ENGRAM_RETURN_IF_ERROR(b.world->barrier());
      ENGRAM_RETURN_IF_ERROR(b.shm->unlink("a"));
      ENGRAM_ASSIGN_OR_RETURN(ShmInfo still, b.shm->info());
      if (still.tmpfs_bytes_free != 24 * kMiB) return internal_error("space returned while still mapped");
      first.reset();
      ENGRAM_ASSIGN_OR_RETURN(ShmInfo info, b.shm->info());
      if (info.tmpfs_bytes_free != 64 * kMiB || info.tmpfs_bytes_total != 64 * kMiB)
        return internal_error("space not returned");
      return b.world->barrier();
    }
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    auto second = b.shm->create("b", 40 * kMiB);
    if (second.is_ok() || second.status().code() != ErrorCode::kResourceExhausted)
      return internal_error("the host's tmpfs total was not shared");
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    ENGRAM_ASSIGN_OR_RETURN(auto again, b.shm->create("b", 40 * kMiB));
    return b.shm->unlink("b");
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << Ledger::format(run->leaks);
}

TEST(SimHostSharedMemory, NotMountedIsAFailedPrecondition) {
  WorldSpec spec;
  spec.hosts = {host("h", 1, 0, /*mounted=*/false)};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(ShmInfo info, b.shm->info());
    if (info.mounted) return internal_error("reported mounted");
    auto s = b.shm->create("x", kMiB);
    return s.is_ok() ? internal_error("created without /dev/shm") : s.status();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_EQ(run->statuses[0].code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(run->statuses[0].message(), HasSubstr("not mounted"));
}

TEST(SimHostSharedMemory, NamesArePerHostAndReadersSeeTheWritersBytes) {
  WorldSpec spec;
  spec.hosts = {host("a", 2, kGiB), host("b", 1, kGiB)};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    // Rank 0 (host a) and rank 2 (host b) both create "t": different hosts.
    std::unique_ptr<ShmMapping> mine;
    if (b.world_rank != 1) {
      ENGRAM_ASSIGN_OR_RETURN(mine, b.shm->create("t", 4 * kMiB));
      std::memset(mine->bytes().data() + 5, 'a' + b.world_rank, 1);
    }
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    if (b.world_rank == 1) {
      auto dup = b.shm->create("t", 4 * kMiB);
      if (dup.is_ok() || dup.status().code() != ErrorCode::kAlreadyExists) return internal_error("name not taken");
      ENGRAM_ASSIGN_OR_RETURN(auto reader, b.shm->open_read_only("t", 4 * kMiB));
      if (!reader->bytes().empty()) return internal_error("a read-only map handed out writable bytes");
      if (reader->data()[5] != std::byte{'a'}) return internal_error("reader does not see host a's segment");
      if (b.shm->open_read_only("t", 8 * kMiB).is_ok()) return internal_error("mapped past the segment");
    }
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    if (b.world_rank != 1) ENGRAM_RETURN_IF_ERROR(b.shm->unlink("t"));
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << Ledger::format(run->leaks);
}

TEST(SimHostSharedMemory, CreateAndWriteFaultsLeaveNoSegmentBehind) {
  for (FaultSite site : {FaultSite::kShmCreate, FaultSite::kShmWrite}) {
    WorldSpec spec;
    spec.hosts = {host("h", 1, kGiB)};
    spec.faults.plan(site, 0);
    Status first;
    auto run = run_world(spec, [&](RankBackend& b) -> Status {
      auto failed = b.shm->create("t", 8 * kMiB);
      if (failed.is_ok()) return internal_error("fault did not fire");
      first = failed.status();
      ENGRAM_ASSIGN_OR_RETURN(auto retry, b.shm->create("t", 8 * kMiB));  // the name is free again
      return b.shm->unlink("t");
    });
    ASSERT_TRUE(run.is_ok());
    EXPECT_TRUE(run->all_ok()) << fault_site_name(site) << ": " << run->summary();
    EXPECT_EQ(first.code(), ErrorCode::kResourceExhausted);
    EXPECT_EQ(first.context().step, fault_site_name(site));
    EXPECT_EQ(run->faults.fired(site), 1u);
    EXPECT_TRUE(run->leaks.empty()) << Ledger::format(run->leaks);
  }
}

TEST(SimHostSharedMemory, ADeadCreatorsMappingGoesButItsSegmentStaysOnTmpfs) {
  WorldSpec spec;
  spec.hosts = {host("h", 2, kGiB)};
  spec.faults.plan(FaultSite::kRankDeath, 0, 1, "collective");
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    std::unique_ptr<ShmMapping> mine;
    if (b.world_rank == 0) {
      ENGRAM_ASSIGN_OR_RETURN(mine, b.shm->create("stale", 2 * kMiB));
    }
    return b.world->barrier();  // rank 0 dies here
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->died[0]);
  ASSERT_EQ(run->leaks.size(), 1u) << Ledger::format(run->leaks);
  EXPECT_EQ(run->leaks[0].kind, ResourceKind::kShmSegment);  // as a crashed job leaves /dev/shm/stale
}

}  // namespace
}  // namespace engram::sim
