// `engramlab launch --emulate-driver dep.yaml`: every rank runs over the
// emulated CUDA driver as the rank of the deployment it is (its host, its
// local rank there), and `doctor` on an emulated host says what it says on
// the real one: the H200 machine's entry gives FABRIC attribute yes, FABRIC
// create NOT_PERMITTED, POSIX fds yes; a GB300 entry with IMEX gives a
// working FABRIC probe and an NVLink domain. The job's world file goes with it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/process_run.h"
#include "tests/temp_dir.h"

namespace engram {
namespace {

using testing::count;

int emulated_job_dirs_in_tmp() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/tmp"))
    n += e.path().filename().string().rfind("engramlab-emulated-", 0) == 0;
  return n;
}

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
  - {name: gb300, count: 2, gpus: 4, gpu_model: GB300, nvlink_domain: nvl72-a, imex_channel: true, fabric_attribute: true}
layout: {tp: 8, dp: 1}
)");
  const int dirs_before = emulated_job_dirs_in_tmp();
  auto run = testing::run(kEngramlab + " launch --emulate-driver " + dep + " -- " + ENGRAM_BINARY_DIR +
                          "/tests/emulated_rank_worker exchange");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(count(run.output, "handle fabric, 8 ranks: EXCHANGE OK"), 8u) << run.output;
  EXPECT_EQ(count(run.output, "NOTHING LEFT"), 8u) << run.output;
  EXPECT_EQ(emulated_job_dirs_in_tmp(), dirs_before);
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
  - {name: b300-0, gpus: 8, gpu_model: B300}
layout: {tp: 8, dp: 1}
)");
  const int dirs_before = emulated_job_dirs_in_tmp();
  auto run = testing::run(kEngramlab + " launch -n 4 --emulate-driver " + dep + " -- true");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(count(run.output, "places 8 ranks on its emulated hosts"), 1u) << run.output;
  EXPECT_EQ(emulated_job_dirs_in_tmp(), dirs_before);
}

}  // namespace
}  // namespace engram
