// The owners of device memory (core/backend/device_resources.h) on the
// emulator, whose ledger sees every allocation, range and mapping and whose
// VMM refuses the wrong teardown order (a range freed while still mapped):
// each resource is given back exactly once, in order, on failure paths too.
#include "core/backend/device_resources.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <utility>

#include "core/base/units.h"
#include "sim/world.h"

namespace engram {
namespace {

sim::WorldSpec one_gpu() {
  sim::WorldSpec spec;
  HostSpec host;
  host.name = "h200-0";
  host.gpu_count = 1;
  host.gpu_model = "H200";
  spec.hosts = {host};
  return spec;
}

Status expect(bool condition, const std::string& what) { return condition ? Status::ok() : internal_error(what); }

TEST(DeviceResources, MappedAllocationGivesEverythingBackInOrderOnce) {
  auto run = sim::run_world(one_gpu(), [](RankBackend& b) -> Status {
    DeviceMemory& d = *b.device;
    ENGRAM_ASSIGN_OR_RETURN(MappedAllocation shard, MappedAllocation::create(d, 4 * kMiB, HandleType::kPosixFd));
    ENGRAM_RETURN_IF_ERROR(expect(shard.valid() && shard.bytes() == 4 * kMiB, "a valid 4 MiB shard"));
    const std::array<std::byte, 8> bytes{std::byte{1}};
    ENGRAM_RETURN_IF_ERROR(d.copy_to_device(shard.address(), bytes));  // mapped with access granted
    // The emulator refuses to free a range that is still mapped: ok here
    // means unmap came first.
    ENGRAM_RETURN_IF_ERROR(shard.release());
    ENGRAM_RETURN_IF_ERROR(expect(!shard.valid(), "released"));
    return shard.release();  // a second release gives nothing back twice
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

TEST(DeviceResources, DestructorsAndMovesGiveBack) {
  auto run = sim::run_world(one_gpu(), [](RankBackend& b) -> Status {
    DeviceMemory& d = *b.device;
    { ENGRAM_ASSIGN_OR_RETURN(MappedAllocation dropped, MappedAllocation::create(d, 2 * kMiB, HandleType::kPosixFd)); }
    ENGRAM_ASSIGN_OR_RETURN(MappedAllocation a, MappedAllocation::create(d, 2 * kMiB, HandleType::kPosixFd));
    ENGRAM_ASSIGN_OR_RETURN(MappedAllocation c, MappedAllocation::create(d, 2 * kMiB, HandleType::kPosixFd));
    a = std::move(c);  // a's first shard goes back before it takes c's
    ENGRAM_RETURN_IF_ERROR(expect(!c.valid() && a.valid(), "moved"));
    ENGRAM_ASSIGN_OR_RETURN(DeviceRange range, DeviceRange::reserve(d, 2 * kMiB));
    DeviceRange other = std::move(range);
    return expect(!range.valid() && other.valid(), "range moved");
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

TEST(DeviceResources, AFailedStepLeavesNothingAndNamesTheStep) {
  for (auto [site, step] : {std::pair{sim::FaultSite::kMap, "map"}, std::pair{sim::FaultSite::kAccess, "access"}}) {
    sim::WorldSpec spec = one_gpu();
    spec.faults.plan(site, 0);
    std::string seen;
    auto run = sim::run_world(spec, [&seen](RankBackend& b) -> Status {
      auto shard = MappedAllocation::create(*b.device, 2 * kMiB, HandleType::kPosixFd);
      if (shard.is_ok()) return internal_error("create succeeded under an injected fault");
      seen = shard.status().context().step;
      return Status::ok();
    });
    ASSERT_TRUE(run.is_ok());
    EXPECT_TRUE(run->all_ok()) << run->summary();
    EXPECT_EQ(run->faults.fired(site), 1u);
    EXPECT_EQ(seen, step);
    EXPECT_TRUE(run->leaks.empty()) << step << ": " << sim::Ledger::format(run->leaks);
  }
}

}  // namespace
}  // namespace engram
