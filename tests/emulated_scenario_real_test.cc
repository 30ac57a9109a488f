// `engramlab scenario run --real --emulate-driver`: the scenario runner's
// real mode with every rank over the emulated CUDA driver and NVML as the
// rank of the scenario's world it is. The device_peer scenarios of the
// emulated-driver issue (two GB300 nodes over FABRIC, one B300 over POSIX
// fds, two hosts without IMEX, an NVL72 rack with an import fault, ranks
// sharing a GPU) run through the real backend (backends/cuda, the real
// rendezvous and fd channel), look up through the imported mappings on the
// CPU, and must equal the emulator's run of the same file rank by rank:
// placement, handle type, lookup hashes, warnings and the error's kind.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>

#include "tests/process_run.h"
#include "tests/temp_dir.h"

namespace engram {
namespace {

using testing::count;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
const std::string kScenarios = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/";

testing::ProcessRun run_real_over_driver(const std::string& files) {
  return testing::run(kEngramlab + " scenario run --real --emulate-driver " + files);
}

TEST(ScenarioRealOverEmulatedDriver, TheIssuesDevicePeerWorldsPassThroughTheRealBackendEqualToTheEmulator) {
  std::string files;
  for (const char* name : {"gb300_two_nodes_fabric", "b300_one_host_posix", "spanning_hosts_no_fabric",
                           "nvl72_rack_import_fault", "shared_gpu_device_peer"})
    files += " " + kScenarios + name + ".yaml";
  const auto run = run_real_over_driver(files);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("5 passed, 0 skipped, 0 failed of 5 scenarios on real processes"), std::string::npos)
      << run.output;
  // Every rank that started agrees with the emulator (the row ends "yes"):
  // 8 + 8 ranks that looked up, 72 + 2 more.
  EXPECT_EQ(count(run.output, "  NO\n"), 0u) << run.output;
  static const std::regex kLookedUpAlike(R"(\n  [0-9]+ +device_peer +device_peer +[0-9a-f]{16},[0-9a-f]{16} +yes)");
  EXPECT_EQ(std::distance(std::sregex_iterator(run.output.begin(), run.output.end(), kLookedUpAlike),
                          std::sregex_iterator()),
            8 + 8 + 2)
      << run.output;
  EXPECT_NE(run.output.find("emulated driver: 72 ranks on 18 emulated hosts (4 x GB200)"), std::string::npos);
  EXPECT_NE(run.output.find("faults fired in the emulated driver: import on rank 9"), std::string::npos);
  EXPECT_NE(run.output.find("error: real permission_denied, emulator permission_denied: same"), std::string::npos);
  EXPECT_NE(run.output.find("error: real failed_precondition, emulator failed_precondition: same"), std::string::npos);
  EXPECT_NE(run.output.find("spans 2 hosts (h200-a, h200-b)"), std::string::npos) << run.output;
}

TEST(ScenarioRealOverEmulatedDriver, AWrongExpectationFailsTheScenario) {
  // The FABRIC world with an expectation of POSIX fds: the check can fail.
  testing::TempDir dir;
  std::ifstream in(kScenarios + "gb300_two_nodes_fabric.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "handle_type: fabric";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "handle_type: posix_fd");
  const std::string path = dir.path + "/wrong.yaml";
  std::ofstream(path) << text;
  const auto run = run_real_over_driver(path);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("0 passed, 0 skipped, 1 failed"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("posix_fd"), std::string::npos) << run.output;
}

TEST(ScenarioRealOverEmulatedDriver, WhatTheDriverCannotRunIsSkippedSayingWhy) {
  const auto run = run_real_over_driver(kScenarios + "dep4_shared.yaml " + kScenarios +
                                        "own_model_device_collective.yaml " + kScenarios + "fault_hang.yaml " +
                                        kScenarios + "nvl72_16_racks.yaml");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("0 passed, 4 skipped, 0 failed"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("the plan places host_shared on rank 0"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("the plan places device_collective on rank 0"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("need NCCL, which the emulated driver refuses"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("fault hang on rank"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("more than the 72 processes --emulate-driver starts"), std::string::npos) << run.output;
}

TEST(ScenarioRealOverEmulatedDriver, WithoutRealTheFlagIsRefusedNamingWhatToAdd) {
  const auto run = testing::run(kEngramlab + " scenario run --emulate-driver " + kScenarios + "b300_one_host_posix.yaml");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--emulate-driver runs the real processes of --real"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("add --real"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace engram
