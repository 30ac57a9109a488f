// The emulated CUDA driver (backends/emulated_driver) call by call, through
// the real backend's calls (backends/cuda's CudaDeviceMemory) where it has
// them: the VMM sequence, cuMemGetInfo's ledger, and every bad input of the
// issue's acceptance (a forged or unknown FABRIC handle, a handle of a
// released allocation, a map past the reservation, access set on an unmapped
// range, an import from a dead exporter, FABRIC across domains or without an
// IMEX channel), each with the driver's code and nothing left behind. This
// process is rank 0 of the world below (host gb300-a); the cross-process
// cases start tests/emulated_rank_worker_main.cc as other ranks.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/nvml_fabric.h"
#include "tests/emulated_driver_world.h"

namespace engram {
namespace {

using testing::count;

constexpr uint64_t kMiB = 1ull << 20;

// Ranks 0-1 on gb300-a (domain nvl-a), 2-3 on gb300-b (domain nvl-b), 4-5 on
// an H200 host whose driver reports FABRIC but which has no IMEX channel.
constexpr const char* kWorld = R"(
hosts:
  - {name: gb300-a, gpus: 2, gpu_model: GB300, gpu_memory: 64MiB, nvlink_domain: nvl-a, imex_channel: true, fabric_attribute: true}
  - {name: gb300-b, gpus: 2, gpu_model: GB300, gpu_memory: 64MiB, nvlink_domain: nvl-b, imex_channel: true, fabric_attribute: true}
  - {name: h200-0, gpus: 2, gpu_model: H200, fabric_attribute: true, imex_channel: false}
layout: {tp: 6, dp: 1}
)";

// Emulated memory this process holds: the driver's memfds, open or mapped.
int emulated_memory_left() {
  int left = 0;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) left += line.find("/memfd:engramlab-emu.") != std::string::npos;
  for (int fd = 0; fd < 4096; ++fd) {
    char link[256] = {};
    if (::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof link - 1) > 0 &&
        std::strstr(link, "/memfd:engramlab-emu."))
      ++left;
  }
  return left;
}

class EmulatedDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto made = testing::make_emulated_world(kWorld);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    world_ = made->release();
    ::setenv("ENGRAMLAB_EMULATED_WORLD", world_->world_path.c_str(), 1);
    ::setenv("RANK", "0", 1);
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    // Loaded by path under its soname: the backend's dlopen("libcuda.so.1")
    // then finds this one.
    ASSERT_NE(::dlopen(ENGRAM_EMULATED_DRIVER_LIB_DIR "/libcuda.so.1", RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
    ASSERT_NE(::dlopen(ENGRAM_EMULATED_DRIVER_LIB_DIR "/libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL), nullptr);
  }
  static void TearDownTestSuite() {
    delete world_;
    world_ = nullptr;
  }
  void SetUp() override {
    auto opened = cuda::CudaDeviceMemory::open(0);
    ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
    device_ = std::move(opened).value();
  }
  void TearDown() override {
    device_.reset();
    EXPECT_EQ(emulated_memory_left(), 0);
  }

  // A worker as rank `rank` of the world.
  static std::string worker(int rank, const std::string& args) {
    return fmt::format("RANK={} {} {}/tests/emulated_rank_worker {}", rank, testing::emulated_driver_env(*world_),
                       ENGRAM_BINARY_DIR, args);
  }

  static testing::EmulatedWorld* world_;
  std::unique_ptr<cuda::CudaDeviceMemory> device_;
};
testing::EmulatedWorld* EmulatedDriver::world_ = nullptr;

TEST_F(EmulatedDriver, TheHostsFactsComeFromTheWorld) {
  auto info = device_->info();
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->name, "NVIDIA GB300");
  EXPECT_EQ(info->memory_bytes_total, 64 * kMiB);
  EXPECT_EQ(info->granularity_bytes, 2 * kMiB);
  EXPECT_TRUE(info->vmm_supported);
  EXPECT_TRUE(info->posix_fd_supported);
  EXPECT_TRUE(info->fabric_attribute);
  EXPECT_EQ(info->bus_id, "0000:10:00.0");
  auto host = cuda::emulated_host();
  ASSERT_TRUE(host.has_value());
  EXPECT_EQ(host->hostname, "gb300-a");
  EXPECT_TRUE(host->imex_channel);
  EXPECT_TRUE(device_->probe_fabric().is_ok());
  // NVML: the GPU's NVLink domain, the same for every GPU of the domain.
  const cuda::NvlinkDomain domain = cuda::nvlink_domain_for_pci_bus_id(info->bus_id);
  EXPECT_FALSE(domain.domain.empty()) << domain.reason;
  EXPECT_EQ(cuda::nvlink_domain_for_pci_bus_id("0000:11:00.0").domain, domain.domain);
}

TEST_F(EmulatedDriver, VmmSequenceMapsMemoryTheCpuReadsAndChargesTheGpu) {
  auto before = device_->memory_info();
  ASSERT_TRUE(before.is_ok());
  auto allocation = device_->create(4 * kMiB, HandleType::kPosixFd);
  ASSERT_TRUE(allocation.is_ok()) << allocation.status().to_string();
  EXPECT_EQ(device_->memory_info()->first, before->first - 4 * kMiB);
  auto range = device_->reserve(8 * kMiB);
  ASSERT_TRUE(range.is_ok());
  ASSERT_TRUE(device_->map(*range + 2 * kMiB, 4 * kMiB, *allocation).is_ok());
  ASSERT_TRUE(device_->set_access(*range + 2 * kMiB, 4 * kMiB).is_ok());
  std::vector<std::byte> bytes(4 * kMiB);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7 + 3);
  ASSERT_TRUE(device_->copy_to_device(*range + 2 * kMiB, bytes).is_ok());
  // The mapped device pointer is this process's memory.
  EXPECT_EQ(std::memcmp(reinterpret_cast<const void*>(*range + 2 * kMiB), bytes.data(), bytes.size()), 0);
  std::vector<std::byte> back(4 * kMiB);
  ASSERT_TRUE(device_->copy_from_device(back, *range + 2 * kMiB).is_ok());
  EXPECT_EQ(back, bytes);
  // The memory outlives its handle while mapped, as on the device.
  ASSERT_TRUE(device_->release(*allocation).is_ok());
  EXPECT_EQ(device_->memory_info()->first, before->first - 4 * kMiB);
  ASSERT_TRUE(device_->unmap(*range + 2 * kMiB, 4 * kMiB).is_ok());
  ASSERT_TRUE(device_->free_reservation(*range, 8 * kMiB).is_ok());
  EXPECT_EQ(device_->memory_info()->first, before->first);
}

TEST_F(EmulatedDriver, FabricExportImportsInTheSameDomain) {
  auto allocation = device_->create(2 * kMiB, HandleType::kFabric);
  ASSERT_TRUE(allocation.is_ok()) << allocation.status().to_string();
  auto handle = device_->export_handle(*allocation, HandleType::kFabric);
  ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
  auto imported = device_->import_handle(*handle);
  ASSERT_TRUE(imported.is_ok()) << imported.status().to_string();
  auto range = device_->reserve(4 * kMiB);
  ASSERT_TRUE(range.is_ok());
  ASSERT_TRUE(device_->map(*range, 2 * kMiB, *allocation).is_ok());
  ASSERT_TRUE(device_->map(*range + 2 * kMiB, 2 * kMiB, *imported).is_ok());
  ASSERT_TRUE(device_->set_access(*range, 4 * kMiB).is_ok());
  auto* own = reinterpret_cast<unsigned char*>(*range);
  own[12345] = 0xA5;
  EXPECT_EQ(reinterpret_cast<unsigned char*>(*range + 2 * kMiB)[12345], 0xA5);  // one memory, two mappings
  ASSERT_TRUE(device_->unmap(*range, 4 * kMiB).is_ok());
  ASSERT_TRUE(device_->free_reservation(*range, 4 * kMiB).is_ok());
  ASSERT_TRUE(device_->release(*imported).is_ok());
  ASSERT_TRUE(device_->release(*allocation).is_ok());
}

TEST_F(EmulatedDriver, BadInputsGetTheDriversCodeAndLeaveNothing) {
  // A forged FABRIC handle.
  ShareableHandle forged;
  forged.type = HandleType::kFabric;
  for (size_t i = 0; i < forged.fabric.size(); ++i) forged.fabric[i] = static_cast<uint8_t>(i * 31 + 7);
  auto imported = device_->import_handle(forged);
  ASSERT_FALSE(imported.is_ok());
  EXPECT_EQ(imported.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(imported.status().message().find("CUDA_ERROR_INVALID_VALUE"), std::string::npos);

  // The handle of a released allocation (well-formed, unknown to its exporter now).
  auto allocation = device_->create(2 * kMiB, HandleType::kFabric);
  ASSERT_TRUE(allocation.is_ok());
  auto handle = device_->export_handle(*allocation, HandleType::kFabric);
  ASSERT_TRUE(handle.is_ok());
  ASSERT_TRUE(device_->release(*allocation).is_ok());
  imported = device_->import_handle(*handle);
  ASSERT_FALSE(imported.is_ok());
  EXPECT_EQ(imported.status().code(), ErrorCode::kInvalidArgument) << imported.status().to_string();

  // A map past the reservation, access on an unmapped range.
  allocation = device_->create(4 * kMiB, HandleType::kPosixFd);
  ASSERT_TRUE(allocation.is_ok());
  auto range = device_->reserve(2 * kMiB);
  ASSERT_TRUE(range.is_ok());
  Status mapped = device_->map(*range, 4 * kMiB, *allocation);
  EXPECT_EQ(mapped.code(), ErrorCode::kInvalidArgument) << mapped.to_string();
  Status access = device_->set_access(*range, 2 * kMiB);
  EXPECT_EQ(access.code(), ErrorCode::kInvalidArgument) << access.to_string();
  // A copy to memory without access, a second release, a foreign fd.
  EXPECT_EQ(device_->copy_to_device(*range, std::vector<std::byte>(16)).code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(device_->free_reservation(*range, 2 * kMiB).is_ok());
  ASSERT_TRUE(device_->release(*allocation).is_ok());
  EXPECT_EQ(device_->release(*allocation).code(), ErrorCode::kInvalidArgument);
  ShareableHandle not_memory;
  not_memory.fd = 0;  // stdin: no allocation of this world
  EXPECT_EQ(device_->import_handle(not_memory).status().code(), ErrorCode::kInvalidArgument);

  // Past the GPU's memory: the driver's OUT_OF_MEMORY.
  auto huge = device_->create(66 * kMiB, HandleType::kPosixFd);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_EQ(huge.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos);
}

TEST_F(EmulatedDriver, KernelsAndStreamsAreRefusedNamingTheCall) {
  using Refused = int (*)(...);
  for (const char* call : {"cuLaunchKernel", "cuModuleLoadData", "cuStreamCreate", "cuGetExportTable"}) {
    auto fn = reinterpret_cast<Refused>(::dlsym(RTLD_DEFAULT, call));
    ASSERT_NE(fn, nullptr) << call;
    EXPECT_EQ(fn(nullptr, nullptr, 0), 801) << call;  // CUDA_ERROR_NOT_SUPPORTED
  }
}

// Cross-process: a FABRIC export by rank 0 (gb300-a) imported by rank 1 (the
// same host), rank 2 (gb300-b: another domain), rank 4 (h200: no IMEX
// channel), then by rank 1 after the exporter died.
TEST_F(EmulatedDriver, FabricImportsAcrossProcessesDomainsAndADeadExporter) {
  int to_child[2];
  int from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  auto before = device_->memory_info();  // this process is rank 0 too: GPU 0 of gb300-a
  ASSERT_TRUE(before.is_ok());
  const std::string command = worker(0, "export-fabric");
  const pid_t exporter = ::fork();
  if (exporter == 0) {
    ::dup2(to_child[0], 0);
    ::dup2(from_child[1], 1);
    ::close(to_child[1]);
    ::close(from_child[0]);
    ::execl("/bin/sh", "sh", "-c", ("exec env " + command).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  std::string line;
  char c;
  while (::read(from_child[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(from_child[0]);
  ASSERT_EQ(line.rfind("HANDLE ", 0), 0u) << line;
  const std::string hex = line.substr(7);
  EXPECT_EQ(device_->memory_info()->first, before->first - 2 * kMiB);  // the exporter's allocation, charged here

  auto same_host = testing::run(worker(1, "import-fabric " + hex));
  EXPECT_EQ(count(same_host.output, "IMPORT OK"), 1u) << same_host.output;
  EXPECT_EQ(count(same_host.output, "NOTHING LEFT"), 1u) << same_host.output;
  auto other_domain = testing::run(worker(2, "import-fabric " + hex));
  EXPECT_EQ(count(other_domain.output, "IMPORT REFUSED: permission_denied"), 1u) << other_domain.output;
  EXPECT_EQ(count(other_domain.output, "fabric handles import only within one IMEX domain"), 1u) << other_domain.output;
  auto no_imex = testing::run(worker(4, "import-fabric " + hex));
  // The real driver answers an import without an IMEX channel NOT_SUPPORTED
  // (the H200, tests/gpu/emulated_driver_agreement_test.cc), not NOT_PERMITTED.
  EXPECT_EQ(count(no_imex.output, "IMPORT REFUSED: failed_precondition"), 1u) << no_imex.output;
  EXPECT_EQ(count(no_imex.output, "CUDA_ERROR_NOT_SUPPORTED"), 2u) << no_imex.output;
  EXPECT_GE(count(no_imex.output, "no IMEX channel on host h200-0"), 1u) << no_imex.output;

  const std::string sockets_of_exporter =
      "grep -c 'engramlab-emu-imex.*[.]" + std::to_string(exporter) + "$' /proc/net/unix";
  EXPECT_EQ(testing::run(sockets_of_exporter).output, "1\n");  // its IMEX service listens
  ::kill(exporter, SIGKILL);
  int status = 0;
  ::waitpid(exporter, &status, 0);
  ::close(to_child[1]);
  // SIGKILL left nothing: its memory is back and its IMEX socket is gone.
  EXPECT_EQ(device_->memory_info()->first, before->first);
  EXPECT_EQ(testing::run(sockets_of_exporter).output, "0\n");
  auto dead = testing::run(worker(1, "import-fabric " + hex));
  EXPECT_EQ(count(dead.output, "IMPORT REFUSED: invalid_argument"), 1u) << dead.output;
  EXPECT_GE(count(dead.output, "no longer exists"), 1u) << dead.output;
  EXPECT_EQ(count(dead.output, "NOTHING LEFT"), 1u) << dead.output;
}

// The H200 machine's entry: the attribute says FABRIC, creating it is
// NOT_PERMITTED (no IMEX channel), as the real H200 answered.
TEST_F(EmulatedDriver, H200WithoutImexRefusesFabricCreateAsTheRealOneDid) {
  auto run = testing::run(worker(4, "export-fabric"));
  EXPECT_EQ(count(run.output, "EXPORT REFUSED: permission_denied"), 1u) << run.output;
  EXPECT_GE(count(run.output, "CUDA_ERROR_NOT_PERMITTED"), 1u) << run.output;
}

}  // namespace
}  // namespace engram
