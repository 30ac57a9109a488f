// The device scenarios for the 2 x H200 box (scenarios/real/h200x2_*.yaml)
// where no GPU is visible: the emulator passes them (the expectations hold),
// `scenario run --real` reports each as "skipped: needs GPUs" and never as a
// pass, and ranks started anyway fail with the runtime's "needs a GPU"
// instead of hanging. CUDA_VISIBLE_DEVICES is emptied so the outcome is the
// same on a GPU machine; tools/gpu_real.sh runs them there with the GPUs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "harness/scenario_rank_record.h"
#include "tests/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace engram;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
const std::string kPeer = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/real/h200x2_device_peer.yaml";
const std::string kCollective = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/real/h200x2_device_collective.yaml";
const std::string kHeadSharded =
    std::string(ENGRAM_SOURCE_DIR) + "/scenarios/real/h200x2_device_head_sharded.yaml";
const std::string kNoGpus = "CUDA_VISIBLE_DEVICES= ";

struct ProcessRun {
  int exit_code = -1;
  std::string output;
};

ProcessRun run(const std::string& command) {
  ProcessRun r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  while (pipe != nullptr && std::fgets(buf, sizeof(buf), pipe) != nullptr) r.output += buf;
  const int status = pipe != nullptr ? ::pclose(pipe) : -1;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(RealDevice, TheH200ScenariosPassOnTheEmulator) {
  const ProcessRun r = run(kEngramlab + " scenario run " + kPeer + " " + kCollective + " " + kHeadSharded);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 of 3 scenarios passed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("device_head_sharded"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("device_peer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("device_collective"), std::string::npos) << r.output;
}

TEST(RealDevice, WithoutGpusTheRealRunSkipsBothVisiblyAndPassesNone) {
  const ProcessRun r =
      run(kNoGpus + kEngramlab + " scenario run --real " + kPeer + " " + kCollective + " " + kHeadSharded);
  // Skips do not fail the run, and they are not passes.
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "  skipped: needs GPUs (plan places device_peer on the device for 2 ranks; this host "
                            "has none: "),
            1u)
      << r.output;
  EXPECT_EQ(count(r.output, "  skipped: needs GPUs (plan places device_collective on the device for 2 ranks; this "
                            "host has none: "),
            1u)
      << r.output;
  EXPECT_EQ(count(r.output, "  skipped: needs GPUs (plan places device_head_sharded on the device for 2 ranks; this "
                            "host has none: "),
            1u)
      << r.output;
  EXPECT_NE(r.output.find("0 passed, 3 skipped, 0 failed of 3 scenarios on real processes"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("=> pass"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("launcher exit"), std::string::npos) << "nothing may have been launched:\n" << r.output;
}

// The ranks themselves, launched without GPUs: each fails fast with the
// runtime's refusal (no device), neither waits on the other.
TEST(RealDevice, RanksWithoutAGpuFailWithNeedsAGpu) {
  const engram::testing::TempDir made("/tmp/engramlab-realdevice");
  const std::string& dir = made.path;
  const ProcessRun r =
      run(kNoGpus + "ENGRAMLAB_OP_TIMEOUT_MS=5000 " + kEngramlab + " launch -n 2 --job-id realdev-" +
          std::to_string(::getpid()) + " --grace-ms 5000 -- " + kEngramlab + " scenario rank " + kPeer +
          " --result-dir " + dir);
  EXPECT_NE(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(dir + "/rank-" + std::to_string(rank) + ".json");
    std::string line;
    ASSERT_TRUE(static_cast<bool>(std::getline(in, line))) << "rank " << rank << " left no record\n" << r.output;
    auto record = harness::parse_rank_record(line, "rank record");
    ASSERT_TRUE(record.is_ok()) << record.status().to_string();
    EXPECT_EQ(record->status.code(), ErrorCode::kFailedPrecondition) << record->status.to_string();
    EXPECT_NE(record->status.message().find("device_peer needs a GPU, and this rank has none"), std::string::npos)
        << record->status.to_string();
    EXPECT_EQ(record->status.context().rank, rank);
    EXPECT_TRUE(record->result.started == false) << "rank " << rank;
  }
}

}  // namespace
