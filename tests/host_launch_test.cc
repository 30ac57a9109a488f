// `engramlab launch` with real worker processes: four ranks share one shm
// segment; a SIGKILLed rank stops the others within a bounded time naming
// it, and the next start finds the stale segment, says so and cleans it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "backends/ipc/job_token.h"
#include "backends/shm/posix_shared_memory.h"
#include "tests/process_run.h"
#include "tests/golden_messages.h"

namespace {

using ::engram::testing::golden_message;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using engram::testing::ProcessRun;
using engram::testing::count;
using engram::testing::run;
namespace ipc = engram::ipc;
namespace shm = engram::shm;

const std::string kToken = "hostlaunchtest-token-0123456789";

class HostLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/dev/shm/engramlab-launchtest-XXXXXX";
    shm_dir_ = ::mkdtemp(templ);
    char sock_templ[] = "/tmp/engramlab-launchsock-XXXXXX";
    socket_dir_ = std::string(::mkdtemp(sock_templ)) + "/s";
  }
  void TearDown() override {
    fs::remove_all(shm_dir_);
    fs::remove_all(fs::path(socket_dir_).parent_path());
  }
  // With the job token given (same token and job id: the same segment names,
  // ipc::shm_name_part), else the launcher draws one.
  std::string launch(int n, const std::string& job_id, const std::string& worker_args,
                     const std::string& token = "") const {
    return (token.empty() ? std::string() : "ENGRAMLAB_JOB_TOKEN=" + token + " ") + ENGRAM_BINARY_DIR +
           "/apps/engramlab launch -n " + std::to_string(n) + " --job-id " + job_id +
           " --grace-ms 2000 -- " + ENGRAM_BINARY_DIR + "/tests/host_worker --shm-dir " + shm_dir_ +
           " --socket-dir " + socket_dir_ + " --op-timeout-ms 3000 " + worker_args;
  }
  size_t segments() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(shm_dir_), fs::directory_iterator()));
  }
  std::string shm_dir_, socket_dir_;
};

TEST_F(HostLaunch, FourRanksShareOneSegmentAndReadIdenticalBytes) {
  const ProcessRun r = run(launch(4, "share4", "--bytes 3000000", kToken));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "SELFTEST OK"), 4u) << r.output;
  const std::string segment = shm::segment_name("share4", ipc::shm_name_part(kToken, "share4"), "layer0");
  EXPECT_EQ(count(r.output, "shm segment " + segment + ": 3000000 bytes"), 4u) << r.output;
  EXPECT_EQ(count(r.output, "pattern ok, identical on all ranks: yes"), 4u) << r.output;
  EXPECT_EQ(count(r.output, "all ranks on one host: yes"), 4u) << r.output;
  EXPECT_EQ(count(r.output, "reads \"hello from rank"), 4u) << r.output;
  EXPECT_EQ(segments(), 0u) << "rank 0 unlinks the segment at the end";
}

TEST_F(HostLaunch, KilledWriterStopsTheOthersAndTheNextStartCleansItsSegment) {
  // A rerun under the same token and job id repeats the names, and so finds the leftover.
  const ProcessRun killed = run(launch(4, "crash0", "--kill-rank 0", kToken));
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_NE(killed.output.find("rank 0 (pid"), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find(golden_message("process.killed_by_sigkill")), std::string::npos) << killed.output;
  EXPECT_EQ(count(killed.output, "FAILED: unavailable"), 3u) << killed.output;
  EXPECT_EQ(count(killed.output, "peer 0"), 3u) << "every survivor names the dead rank\n" << killed.output;
  EXPECT_LT(killed.took, 10s);
  ASSERT_EQ(segments(), 1u) << "the dead writer's segment is left behind, as after a real crash";

  const ProcessRun next = run(launch(4, "crash0", "", kToken));
  EXPECT_EQ(next.exit_code, 0) << next.output;
  EXPECT_NE(next.output.find("already exists"), std::string::npos) << next.output;
  EXPECT_NE(next.output.find("no longer running"), std::string::npos) << next.output;
  EXPECT_NE(next.output.find("removed stale segment " + shm_dir_ + "/" +
                             shm::segment_name("crash0", ipc::shm_name_part(kToken, "crash0"), "layer0")),
            std::string::npos)
      << next.output;
  EXPECT_EQ(count(next.output, "SELFTEST OK"), 4u) << next.output;
  EXPECT_EQ(segments(), 0u);
}

TEST_F(HostLaunch, KilledReaderIsNamedByEveryRankAndNothingIsLeft) {
  const ProcessRun r = run(launch(4, "crash2", "--kill-rank 2"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 2 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(golden_message("process.killed_by_sigkill")), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "FAILED: unavailable"), 3u) << r.output;
  EXPECT_EQ(count(r.output, "peer 2"), 3u) << r.output;
  EXPECT_LT(r.took, 10s);
  EXPECT_EQ(segments(), 0u) << "the surviving writer releases the segment it created";
}

TEST_F(HostLaunch, ReportsAFailingCommand) {
  const ProcessRun r = run(std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab launch -n 2 -- /nonexistent/engramlab-binary");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cannot run /nonexistent/engramlab-binary"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with status 127"), std::string::npos) << r.output;
}

}  // namespace
