// MemfdDeviceMemory, the host-memory stand-in for a GPU's VMM on machines
// without one: it names the same steps as the driver and the emulator for the
// same failing calls, shares bytes between an export and its import, has no
// access before set_access (a read faults, as on a GPU), and leaves no
// allocation, reservation, mapping or fd once each is undone.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <array>
#include <cstring>
#include <vector>

#include "backends/memfd/memfd_device_memory.h"
#include "tests/open_fd_count.h"
#include "core/backend/device_resources.h"
#include "tests/device_steps.h"

namespace engram::memfd {
namespace {

constexpr uint64_t kGranule = MemfdDeviceMemory::kDefaultGranularityBytes;

using testing::open_fd_count;

TEST(MemfdDeviceMemory, FailingCallsNameTheSameStepsAsTheDriverAndTheEmulator) {
  MemfdDeviceMemory device;
  engram::testing::expect_device_steps(device, kGranule);
  EXPECT_EQ(device.live_counts(), MemfdLiveCounts{}) << "each failing case undid its own set-up";
}

TEST(MemfdDeviceMemory, InfoSaysPosixFdsAtTheGpuGranularityAndNoFabric) {
  MemfdDeviceMemory device;
  auto info = device.info();
  ASSERT_TRUE(info.is_ok());
  EXPECT_EQ(info->granularity_bytes, kGranule);
  EXPECT_TRUE(info->vmm_supported);
  EXPECT_TRUE(info->posix_fd_supported);
  EXPECT_FALSE(info->fabric_attribute);
  EXPECT_GT(info->memory_bytes_total, 0u);
  EXPECT_EQ(device.probe_fabric().code(), ErrorCode::kFailedPrecondition);
  const Status fabric = device.create(kGranule, HandleType::kFabric).status();
  EXPECT_EQ(fabric.code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(fabric.context().step, "create");
}

TEST(MemfdDeviceMemory, AnImportSharesTheExportersBytesAndEverythingUndoesToNothing) {
  const int fds_before = open_fd_count();
  {
    MemfdDeviceMemory device;
    auto own = DeviceAllocation::create(device, 2 * kGranule, HandleType::kPosixFd);
    ASSERT_TRUE(own.is_ok()) << own.status().to_string();
    auto exported = device.export_handle(own->handle(), HandleType::kPosixFd);
    ASSERT_TRUE(exported.is_ok());
    auto imported = DeviceAllocation::import(device, *exported, 2 * kGranule);
    ASSERT_TRUE(imported.is_ok()) << imported.status().to_string();
    ASSERT_TRUE(device.close_fd(exported->fd).is_ok()) << "the import keeps its own reference";

    auto range = DeviceRange::reserve(device, 4 * kGranule);
    ASSERT_TRUE(range.is_ok());
    EXPECT_EQ(range->address() % kGranule, 0u) << "reservations are granularity-aligned, as the driver's";
    const DevicePtr a = range->address();
    const DevicePtr b = a + 2 * kGranule;
    auto map_a = DeviceMapping::map(device, a, 2 * kGranule, own->handle());
    auto map_b = DeviceMapping::map(device, b, 2 * kGranule, imported->handle());
    ASSERT_TRUE(map_a.is_ok() && map_b.is_ok());
    // Before access is granted, copies are refused (and a raw read would fault).
    std::array<std::byte, 8> probe{};
    EXPECT_EQ(device.copy_from_device(probe, b).code(), ErrorCode::kInvalidArgument);
    ASSERT_TRUE(map_a->grant_access().is_ok());
    ASSERT_TRUE(map_b->grant_access().is_ok());

    std::vector<std::byte> written(2 * kGranule);
    for (size_t i = 0; i < written.size(); ++i) written[i] = static_cast<std::byte>(i * 7 + 3);
    ASSERT_TRUE(device.copy_to_device(a, written).is_ok());
    std::vector<std::byte> read(written.size());
    ASSERT_TRUE(device.copy_from_device(read, b).is_ok());
    EXPECT_EQ(read, written) << "the imported mapping reads the exporter's bytes";
    // A copy across both slots: they are adjacent and both accessible.
    std::vector<std::byte> both(4 * kGranule);
    EXPECT_TRUE(device.copy_from_device(both, a).is_ok());

    const MemfdLiveCounts live{2, 1, 2};
    EXPECT_EQ(device.live_counts(), live);
    EXPECT_EQ(device.free_reservation(a, 4 * kGranule).code(), ErrorCode::kFailedPrecondition)
        << "a reservation that still holds mappings is not freed";
  }
  EXPECT_EQ(open_fd_count(), fds_before) << "every memfd and dup is closed";
}

TEST(MemfdDeviceMemory, OverlappingMapsAndMapsOutsideAReservationAreRefused) {
  MemfdDeviceMemory device;
  auto own = DeviceAllocation::create(device, kGranule, HandleType::kPosixFd);
  ASSERT_TRUE(own.is_ok());
  auto range = DeviceRange::reserve(device, 2 * kGranule);
  ASSERT_TRUE(range.is_ok());
  auto first = DeviceMapping::map(device, range->address(), kGranule, own->handle());
  ASSERT_TRUE(first.is_ok());
  const Status twice = device.map(range->address(), kGranule, own->handle());
  EXPECT_EQ(twice.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("overlaps a live mapping"), std::string::npos) << twice.message();
  const Status past_end = device.map(range->address() + 2 * kGranule, kGranule, own->handle());
  EXPECT_NE(past_end.message().find("lies in no reservation"), std::string::npos) << past_end.message();
  const Status too_big = device.map(range->address(), 2 * kGranule, own->handle());
  EXPECT_NE(too_big.message().find("cannot map"), std::string::npos) << too_big.message();
}

TEST(MemfdDeviceMemoryDeathTest, ARawReadBeforeAccessIsGrantedFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        MemfdDeviceMemory device;
        auto own = device.create(kGranule, HandleType::kPosixFd);
        auto range = device.reserve(kGranule);
        if (!own.is_ok() || !range.is_ok() || !device.map(*range, kGranule, *own).is_ok()) std::_Exit(0);
        volatile const char* p = reinterpret_cast<const char*>(static_cast<uintptr_t>(*range));
        std::printf("%d\n", p[0]);
      },
      "");
}

TEST(MemfdDeviceMemory, AnImportOfSomethingThatIsNoAllocationIsRefused) {
  MemfdDeviceMemory device;
  const int odd = ::memfd_create("odd-size", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(odd, 4096), 0);
  ShareableHandle handle;
  handle.fd = odd;
  const Status s = device.import_handle(handle).status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.context().step, "import");
  EXPECT_NE(s.message().find("is not an exported allocation (4096 bytes"), std::string::npos) << s.message();
  ::close(odd);
  EXPECT_EQ(device.live_counts(), MemfdLiveCounts{});
}

}  // namespace
}  // namespace engram::memfd
