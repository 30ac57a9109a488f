// `engramlab launch --emulate-driver dep.yaml`: every rank runs over the
// emulated CUDA driver as the rank of the deployment it is (its host, its
// local rank there), and `doctor` on an emulated host says what it says on
// the real one: the H200 machine's entry gives FABRIC attribute yes, FABRIC
// create NOT_PERMITTED, POSIX fds yes; a GB300 entry with IMEX gives a
// working FABRIC probe and an NVLink domain. The job's world file goes with it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <iterator>
#include <filesystem>
#include <fstream>

#include "tests/process_run.h"
#include "tests/temp_dir.h"

namespace engram {
namespace {

using testing::count;

// Job directories of launch --emulate-driver whose world names `host` (each
// test names its hosts after its own pid, so tests running beside it do not count).
int world_dirs_naming(const std::string& host) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/tmp")) {
    if (e.path().filename().string().rfind("engramlab-emulated-", 0) != 0) continue;
    std::ifstream world(e.path() / "world");
    std::string text((std::istreambuf_iterator<char>(world)), std::istreambuf_iterator<char>());
    n += text.find("name=" + host) != std::string::npos;
  }
  return n;
}

std::string unique(const std::string& name) { return name + "-" + std::to_string(::getpid()); }

std::string write_deployment(const testing::TempDir& dir, const std::string& yaml) {
  const std::string path = dir.path + "/dep.yaml";
  std::ofstream(path) << yaml;
  return path;
}

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";

TEST(EmulatedLaunch, EveryRankExchangesAsTheRankOfItsEmulatedHost) {
  testing::TempDir dir;
  const std::string dep = write_deployment(dir, R"(
hosts:
  - {name: )" + unique("gb300") + R"(, count: 2, gpus: 4, gpu_model: GB300, nvlink_domain: nvl72-a, imex_channel: true, fabric_attribute: true}
layout: {tp: 8, dp: 1}
)");
  auto run = testing::run(kEngramlab + " launch --emulate-driver " + dep + " -- " + ENGRAM_BINARY_DIR +
                          "/tests/emulated_rank_worker exchange");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(count(run.output, "handle fabric, 8 ranks: EXCHANGE OK"), 8u) << run.output;
  EXPECT_EQ(count(run.output, "NOTHING LEFT"), 8u) << run.output;
  EXPECT_EQ(world_dirs_naming(unique("gb300")), 0);
}

TEST(EmulatedLaunch, DoctorOnTheH200EntrySaysWhatTheRealH200Said) {
  testing::TempDir dir;
  const std::string dep = write_deployment(dir, R"(
hosts:
  - {name: h200-vm, gpus: 1, gpu_model: H200, fabric_attribute: true, imex_channel: false}
layout: {tp: 1, dp: 1}
)");
  auto run = testing::run(kEngramlab + " launch --no-rank-prefix --emulate-driver " + dep + " -- " + kEngramlab +
                          " doctor --local");
  EXPECT_EQ(count(run.output, "GPU 0: NVIDIA H200"), 1u) << run.output;
  EXPECT_EQ(count(run.output, "POSIX fd yes, FABRIC attribute yes"), 1u) << run.output;
  EXPECT_EQ(count(run.output, "FABRIC probe (create + export): permission_denied"), 1u) << run.output;
  EXPECT_GE(count(run.output, "CUDA_ERROR_NOT_PERMITTED"), 1u) << run.output;
}

TEST(EmulatedLaunch, DoctorOnAGb300EntryWithImexFindsFabric) {
  testing::TempDir dir;
  const std::string dep = write_deployment(dir, R"(
hosts:
  - {name: gb300-0, gpus: 4, gpu_model: GB300, nvlink_domain: nvl72-a, imex_channel: true, fabric_attribute: true}
layout: {tp: 4, dp: 1}
)");
  // One rank of the host is enough to ask about its four GPUs.
  auto run = testing::run(kEngramlab + " launch --no-rank-prefix --emulate-driver " + dep +
                          " -- sh -c 'if [ $RANK = 0 ]; then " + kEngramlab + " doctor --local; fi'");
  EXPECT_EQ(count(run.output, "FABRIC probe (create + export): works"), 4u) << run.output;
  EXPECT_EQ(count(run.output, "NVLink domain: none"), 0u) << run.output;
}

TEST(EmulatedLaunch, ARankCountOtherThanTheDeploymentsIsRefusedBeforeAnyStarts) {
  testing::TempDir dir;
  const std::string dep = write_deployment(dir, R"(
hosts:
  - {name: )" + unique("b300") + R"(, gpus: 8, gpu_model: B300}
layout: {tp: 8, dp: 1}
)");
  auto run = testing::run(kEngramlab + " launch -n 4 --emulate-driver " + dep + " -- true");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(count(run.output, "places 8 ranks on its emulated hosts"), 1u) << run.output;
  EXPECT_EQ(world_dirs_naming(unique("b300")), 0);
}

// A rank that hangs in its import (the hang fault: peer access never comes)
// is ended by the launcher's grace after its peer gives up, by a signal (no
// destructor runs); the peer undid its part, and the job's world directory
// is gone. The hung rank's memfds and IMEX socket are the kernel's to free
// with the process (emulated_driver_test checks that after SIGKILL).
TEST(EmulatedLaunch, AHungRankKilledByTheLauncherLeavesNothing) {
  testing::TempDir dir;
  const std::string dep = write_deployment(dir, R"(
hosts:
  - {name: )" + unique("hung") + R"(, count: 2, gpus: 1, gpu_model: GB300, nvlink_domain: nvl72-a, imex_channel: true, fabric_attribute: true}
layout: {tp: 2, dp: 1}
)");
  auto run = testing::run("ENGRAMLAB_EMULATED_FAULTS=hang:1 ENGRAMLAB_OP_TIMEOUT_MS=2000 " + kEngramlab +
                          " launch --grace-ms 500 --emulate-driver " + dep + " -- " + ENGRAM_BINARY_DIR +
                          "/tests/emulated_rank_worker exchange --bytes 2097152");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_EQ(count(run.output, "fault 'hang' fired on rank 1"), 1u) << run.output;
  EXPECT_EQ(count(run.output, "rank 0: EXCHANGE REFUSED"), 1u) << run.output;
  EXPECT_EQ(count(run.output, "rank 0: NOTHING LEFT"), 1u) << run.output;
  EXPECT_EQ(world_dirs_naming(unique("hung")), 0);
}

}  // namespace
}  // namespace engram
