// The emulated VMM: real CUDA error codes where the field saw them, the 2 MiB
// granularity rules, GPU memory bounds, access before use, and memory that
// lives while anything still references it.
#include "sim/sim_device_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/base/units.h"
#include "sim/world.h"
#include "tests/device_steps.h"

namespace engram::sim {
namespace {

using ::testing::HasSubstr;

HostSpec host(std::string name, int gpus, std::string model, std::string domain = "", bool imex = false,
              bool fabric = false) {
  HostSpec h;
  h.name = std::move(name);
  h.gpu_count = gpus;
  h.gpu_model = std::move(model);
  h.nvlink_domain = std::move(domain);
  h.imex_channel = imex;
  h.fabric_attribute = fabric;
  return h;
}

Status expect(bool condition, const std::string& what) { return condition ? Status::ok() : internal_error(what); }

// Rank 0 creates and exports a FABRIC granule; every other rank imports it
// and records the import's Status in imports[rank] (released again where it
// succeeded); `also(rank backend)` then runs on every importer.
Status rank0_fabric_to_the_others(RankBackend& b, std::vector<Status>& imports,
                                  const std::function<Status(RankBackend&)>& also = nullptr) {
  AllocationHandle own = 0;
  std::array<uint8_t, kFabricHandleBytes> mine{};
  if (b.world_rank == 0) {
    ENGRAM_ASSIGN_OR_RETURN(own, b.device->create(2 * kMiB, HandleType::kFabric));
    ENGRAM_ASSIGN_OR_RETURN(ShareableHandle h, b.device->export_handle(own, HandleType::kFabric));
    mine = h.fabric;
  }
  std::vector<std::array<uint8_t, kFabricHandleBytes>> all(imports.size());
  ENGRAM_RETURN_IF_ERROR(b.world->all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all))));
  if (b.world_rank != 0) {
    ShareableHandle h;
    h.type = HandleType::kFabric;
    h.fabric = all[0];
    auto imported = b.device->import_handle(h);
    imports[static_cast<size_t>(b.world_rank)] = imported.is_ok() ? Status::ok() : imported.status();
    if (imported.is_ok()) ENGRAM_RETURN_IF_ERROR(b.device->release(*imported));
    if (also) ENGRAM_RETURN_IF_ERROR(also(b));
  }
  ENGRAM_RETURN_IF_ERROR(b.world->barrier());
  return own ? b.device->release(own) : Status::ok();
}

TEST(SimDeviceMemory, FabricWithoutImexIsNotPermittedEvenWhenTheAttributeSaysSupported) {
  WorldSpec spec;
  spec.hosts = {host("h200-0", 1, "H200", "nv18", /*imex=*/false, /*fabric=*/true),
                host("h100-0", 1, "H100", "", false, /*fabric=*/false)};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(DeviceInfo info, b.device->info());
    Status probe = b.device->probe_fabric();
    auto created = b.device->create(2 * kMiB, HandleType::kFabric);
    ENGRAM_RETURN_IF_ERROR(expect(!probe.is_ok() && !created.is_ok(), "FABRIC must fail"));
    if (b.world_rank == 0) {
      ENGRAM_RETURN_IF_ERROR(expect(info.fabric_attribute, "the attribute says supported"));
      ENGRAM_RETURN_IF_ERROR(expect(probe.code() == ErrorCode::kPermissionDenied, probe.to_string()));
      ENGRAM_RETURN_IF_ERROR(expect(created.status().message().find("CUDA_ERROR_NOT_PERMITTED") != std::string::npos &&
                                        created.status().message().find("IMEX") != std::string::npos,
                                    created.status().to_string()));
    } else {
      ENGRAM_RETURN_IF_ERROR(expect(created.status().message().find("CUDA_ERROR_NOT_SUPPORTED") != std::string::npos,
                                    created.status().to_string()));
    }
    // POSIX-exportable memory works on both.
    ENGRAM_ASSIGN_OR_RETURN(AllocationHandle h, b.device->create(2 * kMiB, HandleType::kPosixFd));
    return b.device->release(h);
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty());
}

// One rack, one host without its IMEX channel: the importer is refused by its
// own missing channel, with the code the H200's driver gave an import
// (NOT_SUPPORTED), where a create there gets NOT_PERMITTED; the emulated
// driver answers alike (core/backend/vmm_world_rules.h).
TEST(SimDeviceMemory, FabricImportOnAHostWithoutImexChannelIsNotSupported) {
  WorldSpec spec;
  spec.hosts = {host("rack-a0", 1, "GB300", "nvl72-a", /*imex=*/true, true),
                host("rack-a1", 1, "GB300", "nvl72-a", /*imex=*/false, true)};
  std::vector<Status> imports(2);
  auto run = run_world(spec, [&](RankBackend& b) -> Status {
    return rank0_fabric_to_the_others(b, imports, [](RankBackend& importer) {
      auto created = importer.device->create(2 * kMiB, HandleType::kFabric);
      return expect(created.status().message().find("CUDA_ERROR_NOT_PERMITTED") != std::string::npos,
                    "a create without the channel stays NOT_PERMITTED: " + created.status().to_string());
    });
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_EQ(imports[1].code(), ErrorCode::kFailedPrecondition) << imports[1].to_string();
  EXPECT_THAT(imports[1].message(), HasSubstr("CUDA_ERROR_NOT_SUPPORTED"));
  EXPECT_THAT(imports[1].message(), HasSubstr("rack-a1"));
  EXPECT_TRUE(run->leaks.empty());
}

TEST(SimDeviceMemory, FabricImportAcrossImexDomainsIsRefused) {
  WorldSpec spec;
  spec.hosts = {host("rack-a0", 2, "GB300", "nvl72-a", true, true), host("rack-b0", 1, "GB300", "nvl72-b", true, true)};
  std::vector<Status> imports(3);
  auto run = run_world(spec, [&](RankBackend& b) -> Status { return rank0_fabric_to_the_others(b, imports); });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(imports[1].is_ok()) << imports[1].to_string();  // same domain, other GPU
  EXPECT_EQ(imports[2].code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(imports[2].message(), HasSubstr("CUDA_ERROR_NOT_PERMITTED"));
  EXPECT_THAT(imports[2].message(), HasSubstr("nvl72-a"));
  EXPECT_THAT(imports[2].message(), HasSubstr("nvl72-b"));
  EXPECT_EQ(imports[2].context().step, "import");
  EXPECT_TRUE(run->leaks.empty());
}

TEST(SimDeviceMemory, GranularityRulesGiveInvalidValue) {
  WorldSpec spec;
  spec.hosts = {host("h", 1, "H200")};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    DeviceMemory& d = *b.device;
    auto bad_create = d.create(kMiB, HandleType::kPosixFd);
    ENGRAM_RETURN_IF_ERROR(expect(bad_create.status().code() == ErrorCode::kInvalidArgument &&
                                      bad_create.status().message().find("CUDA_ERROR_INVALID_VALUE") == 0,
                                  "1 MiB create"));
    ENGRAM_RETURN_IF_ERROR(expect(!d.reserve(3 * kMiB).is_ok(), "3 MiB reserve"));
    ENGRAM_ASSIGN_OR_RETURN(AllocationHandle h, d.create(4 * kMiB, HandleType::kPosixFd));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr base, d.reserve(8 * kMiB));
    ENGRAM_RETURN_IF_ERROR(expect(!d.map(base + kMiB, 4 * kMiB, h).is_ok(), "unaligned map"));
    ENGRAM_RETURN_IF_ERROR(expect(!d.map(base + 6 * kMiB, 4 * kMiB, h).is_ok(), "map past the reservation"));
    ENGRAM_RETURN_IF_ERROR(expect(!d.map(base, 2 * kMiB, h).is_ok(), "map of a different size"));
    ENGRAM_RETURN_IF_ERROR(d.map(base, 4 * kMiB, h));
    ENGRAM_RETURN_IF_ERROR(expect(!d.map(base + 2 * kMiB, 4 * kMiB, h).is_ok(), "overlapping map"));
    ENGRAM_RETURN_IF_ERROR(expect(!d.free_reservation(base, 8 * kMiB).is_ok(), "free with live mappings"));
    ENGRAM_RETURN_IF_ERROR(d.unmap(base, 4 * kMiB));
    ENGRAM_RETURN_IF_ERROR(d.release(h));
    return d.free_reservation(base, 8 * kMiB);
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << Ledger::format(run->leaks);
}

TEST(SimDeviceMemory, MemoryIsBoundedPerGpuAndBackedOnlyWhereWritten) {
  WorldSpec spec;
  spec.hosts = {host("h100", 2, "H100")};
  spec.ranks = {{0, 0}, {0, 0}, {0, 1}};  // two ranks share GPU 0
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    // 60 GiB each: the second on GPU 0 does not fit in 80 GiB; GPU 1 is free.
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    auto h = b.device->create(60 * kGiB, HandleType::kPosixFd);
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    if (!h.is_ok()) {
      return expect(b.world_rank != 2 && h.status().code() == ErrorCode::kResourceExhausted &&
                        h.status().message().find("CUDA_ERROR_OUT_OF_MEMORY") == 0,
                    h.status().to_string());
    }
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr base, b.device->reserve(60 * kGiB));
    ENGRAM_RETURN_IF_ERROR(b.device->map(base, 60 * kGiB, *h));
    ENGRAM_RETURN_IF_ERROR(b.device->set_access(base, 60 * kGiB));
    std::array<std::byte, 8> bytes{std::byte{1}, std::byte{2}};
    ENGRAM_RETURN_IF_ERROR(b.device->copy_to_device(base + 59 * kGiB, bytes));
    std::array<std::byte, 8> back{};
    ENGRAM_RETURN_IF_ERROR(b.device->copy_from_device(back, base + 59 * kGiB));
    ENGRAM_RETURN_IF_ERROR(expect(back == bytes, "read back"));
    ENGRAM_RETURN_IF_ERROR(b.device->unmap(base, 60 * kGiB));
    ENGRAM_RETURN_IF_ERROR(b.device->free_reservation(base, 60 * kGiB));
    return b.device->release(*h);
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty());
}

TEST(SimDeviceMemory, AccessMustBeGrantedAndAddressesArePerProcess) {
  WorldSpec spec;
  spec.hosts = {host("h", 2, "H200")};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    DeviceMemory& d = *b.device;
    ENGRAM_ASSIGN_OR_RETURN(AllocationHandle h, d.create(2 * kMiB, HandleType::kPosixFd));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr base, d.reserve(2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(d.map(base, 2 * kMiB, h));
    std::array<std::byte, 4> x{};
    Status no_access = d.copy_to_device(base, x);
    ENGRAM_RETURN_IF_ERROR(expect(no_access.message().find("CUDA_ERROR_ILLEGAL_ADDRESS") == 0 &&
                                      no_access.message().find("cuMemSetAccess") != std::string::npos,
                                  no_access.to_string()));
    ENGRAM_RETURN_IF_ERROR(d.set_access(base, 2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(d.copy_to_device(base, x));
    // The peer's address of its own mapping means nothing in this process.
    DevicePtr theirs = 0;
    std::vector<DevicePtr> all(2);
    ENGRAM_RETURN_IF_ERROR(b.world->all_gather(std::as_bytes(std::span<const DevicePtr>(&base, 1)),
                                               std::as_writable_bytes(std::span(all))));
    theirs = all[static_cast<size_t>(1 - b.world_rank)];
    ENGRAM_RETURN_IF_ERROR(expect(!d.copy_from_device(x, theirs).is_ok(), "foreign pointer must fault"));
    // Release before unmap: the mapping keeps the memory alive.
    ENGRAM_RETURN_IF_ERROR(d.release(h));
    ENGRAM_RETURN_IF_ERROR(d.copy_from_device(x, base));
    ENGRAM_RETURN_IF_ERROR(d.unmap(base, 2 * kMiB));
    return d.free_reservation(base, 2 * kMiB);
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty());
}

TEST(SimDeviceMemory, ADeadRanksMemoryIsReleasedAsTheDriverWould) {
  WorldSpec spec;
  spec.hosts = {host("h", 2, "H200")};
  spec.faults.plan(sim::FaultSite::kRankDeath, 1, 1, "collective");
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(AllocationHandle h, b.device->create(2 * kMiB, HandleType::kPosixFd));
    ENGRAM_ASSIGN_OR_RETURN(ShareableHandle fd, b.device->export_handle(h, HandleType::kPosixFd));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr base, b.device->reserve(2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(b.device->map(base, 2 * kMiB, h));
    Status barrier = b.world->barrier();  // rank 1 dies entering it, holding all of the above
    ENGRAM_RETURN_IF_ERROR(b.device->unmap(base, 2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(b.device->free_reservation(base, 2 * kMiB));
    ENGRAM_RETURN_IF_ERROR(b.device->close_fd(fd.fd));
    ENGRAM_RETURN_IF_ERROR(b.device->release(h));
    return barrier;
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->died[1]);
  EXPECT_EQ(run->statuses[0].code(), ErrorCode::kUnavailable);
  EXPECT_EQ(run->statuses[0].context().peer, 1);
  EXPECT_TRUE(run->leaks.empty()) << Ledger::format(run->leaks);
}

TEST(SimDeviceMemory, LeftoversAreReportedByTheLedger) {
  WorldSpec spec;
  spec.hosts = {host("h", 1, "H200")};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(AllocationHandle h, b.device->create(2 * kMiB, HandleType::kPosixFd));
    ENGRAM_ASSIGN_OR_RETURN([[maybe_unused]] ShareableHandle fd, b.device->export_handle(h, HandleType::kPosixFd));
    return Status::ok();  // forgets both
  });
  ASSERT_TRUE(run.is_ok());
  ASSERT_EQ(run->leaks.size(), 2u);
  EXPECT_EQ(run->leaks[0].kind, ResourceKind::kAllocation);
  EXPECT_EQ(run->leaks[1].kind, ResourceKind::kExportFd);
  EXPECT_THAT(run->summary(), HasSubstr("export_fd"));
}

// The emulator half of "both DeviceMemory backends name the same step for the
// same failing call" (tests/device_steps.h); the real driver's half is
// tests/gpu/cuda_device_steps_test.cc, run on a GPU machine.
TEST(DeviceSteps, EmulatorNamesEachFailingCallFromTheTable) {
  WorldSpec spec;
  spec.hosts = {host("h200-0", 1, "H200")};
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(DeviceInfo info, b.device->info());
    testing::expect_device_steps(*b.device, info.granularity_bytes);
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << Ledger::format(run->leaks);
}

TEST(DeviceSteps, EveryStepHasItsOwnName) {
  std::set<std::string> names;
  for (int s = 0; s < kDeviceStepCount; ++s) {
    const std::string name = device_step_name(static_cast<DeviceStep>(s));
    EXPECT_NE(name, "?") << s;
    EXPECT_EQ(name.find(' '), std::string::npos) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kDeviceStepCount));
}

}  // namespace
}  // namespace engram::sim
