// Runs the built `engramlab plan` and checks exit codes and the words users read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct CommandRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandRun run_plan(const std::string& args) {
  // Unique per test and call: ctest runs these tests in parallel processes.
  static int calls = 0;
  const std::string err_path = ::testing::TempDir() + "plan_command_test." +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name() + "." +
                               std::to_string(getpid()) + "." + std::to_string(calls++) + ".err";
  const std::string cmd = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab plan " + args + " 2>" + err_path;
  CommandRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (!pipe) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  return r;
}

const std::string kDep4 = "--model deepseek-v4.1-flash --hosts 1 --gpus-per-host 4 --gpu-model GB200 --tp 1 --dp 4 "
                          "--cpu-offload";

TEST(PlanCommand, Dep4WithBigShmSharesOneCopy) {
  CommandRun r = run_plan(kDep4 + " --shm-size 190GiB");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("dp_shared_memory unset -> true (enabled)"), HasSubstr("ranks 0-3: host_shared"),
                           HasSubstr("warnings: none"), HasSubstr("202,758,032,400 B"), HasSubstr("rule 1"),
                           HasSubstr("memory per host"), HasSubstr("KV cache left")));
  EXPECT_THAT(r.out, Not(HasSubstr("host_head_sharded")));
}

TEST(PlanCommand, Dep4WithDockerShmFallsBackAndWarnsOnce) {
  CommandRun r = run_plan(kDep4 + " --shm-size 64MiB");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("ranks 0-3: host_head_sharded"), HasSubstr("188.8 GiB"), HasSubstr("--shm-size"),
                           HasSubstr("--ipc=host"), HasSubstr("rule 3")));
  // One warning, not one per layer.
  const std::string key = "[dp_shared_memory.fallback.shm_too_small]";
  size_t first = r.out.find(key);
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(r.out.find(key, first + 1), std::string::npos);
}

TEST(PlanCommand, JsonIsMachineReadable) {
  CommandRun r = run_plan(kDep4 + " --shm-size 190GiB --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("\"dp_shared_memory\":{\"enabled\":true"),
                           HasSubstr("\"placement\":\"host_shared\""), HasSubstr("\"table_bytes_total\":202758032400"),
                           HasSubstr("\"shm_bytes\":202758032400")));
  EXPECT_EQ(r.out.front(), '{');
}

TEST(PlanCommand, StrictFailureExitsOne) {
  CommandRun r = run_plan(kDep4 + " --shm-size 64MiB --dp-shared-memory true");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("failed_precondition"), HasSubstr("188.8 GiB needed, 64 MiB available"),
                           HasSubstr("--shm-size"), HasSubstr("--ipc=host")));
}

TEST(PlanCommand, BadInputExitsTwo) {
  CommandRun size = run_plan(kDep4 + " --shm-size lots");
  EXPECT_EQ(size.exit_code, 2);
  EXPECT_THAT(size.err, AllOf(HasSubstr("--shm-size"), HasSubstr("'lots'")));
  CommandRun negative = run_plan(kDep4 + " --shm-size -1GiB");
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_THAT(negative.err, HasSubstr("negative"));
  CommandRun tri = run_plan(kDep4 + " --dp-shared-memory maybe");
  EXPECT_EQ(tri.exit_code, 2);
  EXPECT_THAT(tri.err, HasSubstr("true, false or unset"));
  CommandRun mismatch = run_plan("--hosts 1 --gpus-per-host 4 --tp 2 --dp 4");
  EXPECT_EQ(mismatch.exit_code, 2);
  EXPECT_THAT(mismatch.err, HasSubstr("tp * dp = 2 * 4 = 8 ranks, but the hosts give 4"));
  CommandRun tp = run_plan("--tp zero");
  EXPECT_EQ(tp.exit_code, 2);
  EXPECT_THAT(tp.err, HasSubstr("--tp"));
  CommandRun unknown = run_plan(kDep4 + " --shm-sise 64MiB");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("--shm-sise"));
  CommandRun help = run_plan("--help");
  EXPECT_EQ(help.exit_code, 0);
}

TEST(PlanCommand, FileWithFlagOverrides) {
  const std::string file = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/deployments/dep4_gb200_docker_default.yaml";
  CommandRun from_file = run_plan("--file " + file);
  EXPECT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_THAT(from_file.out, HasSubstr("host_head_sharded"));
  CommandRun overridden = run_plan("--file " + file + " --shm-size 190GiB");
  EXPECT_EQ(overridden.exit_code, 0) << overridden.err;
  EXPECT_THAT(overridden.out, AllOf(HasSubstr("ranks 0-3: host_shared"), HasSubstr("gb200-0")));
  CommandRun no_offload = run_plan("--file " + file + " --cpu-offload=false");
  EXPECT_EQ(no_offload.exit_code, 0) << no_offload.err;
  EXPECT_THAT(no_offload.out, HasSubstr("device_collective"));

  const std::string bad = ::testing::TempDir() + "plan_command_bad." + std::to_string(getpid()) + ".yaml";
  std::ofstream(bad) << "hosts:\n  - {name: a, gpus: 4, shm_sise: 1GiB}\n";
  CommandRun typo = run_plan("--file " + bad);
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err, AllOf(HasSubstr("line 2, column 24"), HasSubstr("hosts[0].shm_sise"), HasSubstr("shm_size")));
}

TEST(PlanCommand, PeerShardsShowHandleTypeAndHbm) {
  CommandRun r = run_plan("--hosts 1 --gpus-per-host 8 --tp 8 --peer-shards --cpu-offload");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("ranks 0-7: device_peer"), HasSubstr("handle type posix_fd"),
                           HasSubstr("[peer_shards.precedence]"), HasSubstr("23.605 GiB"), HasSubstr("116.796 GiB")));
  CommandRun across = run_plan("--hosts 2 --tp 8 --dp 2 --peer-shards");
  EXPECT_EQ(across.exit_code, 1);
  EXPECT_THAT(across.err, AllOf(HasSubstr("IMEX channel"), HasSubstr("node-0"), HasSubstr("node-1")));
}

}  // namespace
