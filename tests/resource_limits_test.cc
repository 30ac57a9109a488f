// Limits met with clear errors, never an abort, each under a limit set for a
// child only (prlimit, a pids cgroup): file descriptors for the ranks and
// the rendezvous leader, the emulator's fiber stacks against
// vm.max_map_count and RLIMIT_AS, a progress line without a thread, and
// `engramlab launch` given a token no rank could use.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "sim/fiber_stack_room.h"
#include "tests/cgroup_support.h"
#include "tests/process_run.h"
#include "tests/sanitizer_build.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

namespace fs = std::filesystem;
using testing::count;
using testing::ProcessRun;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
const std::string kWorker = std::string(ENGRAM_BINARY_DIR) + "/tests/host_worker";
const std::string kScenarios = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";

bool aborted(const ProcessRun& r) {
  return r.output.find("terminate called") != std::string::npos || r.output.find("signal 6") != std::string::npos ||
         r.output.find("what():") != std::string::npos || r.output.find("Aborted") != std::string::npos;
}

// The lines that say what went wrong, so a failure report stays short
// enough to be read whole in a CI log.
std::string failure_lines(const std::string& output) {
  std::string lines;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(start, end - start);
    if (line.find("FAILED") != std::string::npos || line.find("engramlab launch:") != std::string::npos ||
        line.find("rror") != std::string::npos)
      lines += line + "\n";
    start = end + 1;
  }
  return lines.empty() ? output : lines;
}

class ResourceLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/dev/shm/engramlab-limits-XXXXXX";
    shm_dir_ = ::mkdtemp(templ);
    // The job's socket directories go under a root of this test's own
    // (XDG_RUNTIME_DIR): at the lowest limits the launcher itself has no
    // descriptor left to sweep them, and TearDown removes what is left.
    char run_templ[] = "/tmp/engramlab-limits-run-XXXXXX";
    run_dir_ = ::mkdtemp(run_templ);
  }
  void TearDown() override {
    fs::remove_all(shm_dir_);
    fs::remove_all(run_dir_);
  }
  // `n` host_worker ranks under `engramlab launch`, with RLIMIT_NOFILE soft:hard for all of them.
  // The launch inherits stdio only (testing::run_with_only_stdio), so a limit
  // leaves the same room here as under any CI runner; job ids carry this
  // test's pid, so copies running at once never share a socket directory.
  ProcessRun launch_under_nofile(const std::string& soft_hard, int n, const std::string& job,
                                 const std::string& launch_flags = "") const {
    return testing::run_with_only_stdio("XDG_RUNTIME_DIR=" + run_dir_ + " prlimit --nofile=" + soft_hard + " " +
                                        kEngramlab + " launch " + launch_flags + " -n " + std::to_string(n) +
                                        " --job-id " + job + "-" + std::to_string(::getpid()) + " --grace-ms 500 -- " +
                                        kWorker + " --shm-dir " + shm_dir_ + " --op-timeout-ms 2000");
  }
  std::string shm_dir_;
  std::string run_dir_;
};

// The soft limit is raised to the hard one at start, as NCCL does: 40 ranks
// meet under a soft limit of 32.
TEST_F(ResourceLimits, ASoftFdLimitBelowTheJobsNeedIsRaisedToTheHardOne) {
  const ProcessRun r = launch_under_nofile("32:4096", 40, "limits-raised");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "SELFTEST OK"), 40u) << r.output;
}

// A hard limit too low for the leader's one socket per member: rank 0 says
// so with the limit and the count, instead of blaming ranks that never joined.
TEST_F(ResourceLimits, AHardFdLimitTooLowForTheLeaderNamesTheLimitAndTheNeed) {
  const ProcessRun r = launch_under_nofile("40:40", 40, "limits-leader", "--no-rank-prefix");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_FALSE(aborted(r)) << r.output;
  EXPECT_NE(r.output.find("rank 0: FAILED: resource_exhausted: too few file descriptors: rank 0 (the rendezvous "
                          "leader of 40 ranks: one socket per member) needs 43 more; RLIMIT_NOFILE is 40 (hard 40)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("never joined"), std::string::npos) << r.output;
  // The launcher's own pipes are counted before it forks a rank.
  const ProcessRun launcher = launch_under_nofile("40:40", 40, "limits-launcher");
  EXPECT_EQ(launcher.exit_code, 1) << launcher.output;
  EXPECT_NE(launcher.output.find("too few file descriptors: engramlab launch, relaying the output of 40 ranks"),
            std::string::npos)
      << launcher.output;
}

// Every limit from "nothing fits" to "enough", one by one (each threshold
// where another descriptor is first needed: the socket directory's walk, the
// job token, the rendezvous sockets, the ring's memfd): each run ends with a
// Status (an error naming RLIMIT_NOFILE where it did not fit), never an
// abort on an uncaught exception from epoll or eventfd, nor an error that
// blames something else. Both sides are asserted: the lowest limits fail and
// the highest fit.
TEST_F(ResourceLimits, EveryFdLimitEndsWithAStatusNeverAnAbort) {
  ENGRAM_SKIP_UNDER_SANITIZERS("ASan keeps fds of its own, so the low fd limits here measure it, not us");
  int fitted = 0;
  int refused = 0;
  for (int limit = 6; limit <= 26; ++limit) {
    const std::string soft_hard = std::to_string(limit) + ":" + std::to_string(limit);
    const ProcessRun r = launch_under_nofile(soft_hard, 4, "limits-" + std::to_string(limit), "--no-rank-prefix");
    EXPECT_FALSE(aborted(r)) << "RLIMIT_NOFILE " << limit << ":\n" << r.output;
    const bool names_limit = r.output.find("RLIMIT_NOFILE is " + std::to_string(limit)) != std::string::npos;
    EXPECT_TRUE(r.exit_code == 0 || names_limit)
        << "RLIMIT_NOFILE " << limit << ": exit " << r.exit_code << " without naming the limit; the failures:\n"
        << failure_lines(r.output);
    if (r.exit_code == 0) {
      ++fitted;
      EXPECT_EQ(count(r.output, "SELFTEST OK"), 4u) << "RLIMIT_NOFILE " << limit << ":\n" << r.output;
    } else {
      ++refused;
    }
    if (limit == 6) {
      EXPECT_NE(r.exit_code, 0) << "6 descriptors cannot hold a job of 4 ranks:\n" << r.output;
    }
    if (limit == 26) {
      EXPECT_EQ(r.exit_code, 0) << "26 descriptors hold a job of 4 ranks:\n" << r.output;
    }
  }
  EXPECT_GT(fitted, 0);
  EXPECT_GT(refused, 0);
}

TEST(EmulatorRoom, PastVmMaxMapCountTheRunIsRefusedWithTheNumbers) {
  sim::ProcessMapRoom room{.maps_now = 200, .max_map_count = 65530, .address_space_now_bytes = 0,
                           .address_space_limit_bytes = 0};
  const Status s = sim::check_room_for_fiber_stacks(40000, 256 << 10, room);
  EXPECT_EQ(s.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(s.message().find("cannot run 40000 ranks here: their fiber stacks map 80000 regions"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("vm.max_map_count is 65530; raise it (sysctl -w vm.max_map_count=81224)"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(sim::check_room_for_fiber_stacks(32000, 256 << 10, room).is_ok());
}

// Under RLIMIT_AS too small for 1,152 ranks' stacks the scenario fails with
// the numbers (exit 1), where it aborted on std::bad_alloc.
TEST(EmulatorRoom, UnderATightAddressSpaceLimitAScenarioFailsWithTheNumbers) {
  ENGRAM_SKIP_UNDER_SANITIZERS("ASan reserves terabytes of shadow address space, so no RLIMIT_AS fits");
  const ProcessRun r = testing::run("prlimit --as=400000000 " + kEngramlab + " scenario run " + kScenarios +
                                    "/nvl72_16_racks.yaml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(aborted(r)) << r.output;
  // The memory estimate (harness/emulator_memory) or the fiber-stack check
  // (sim/fiber_stack_room), whichever comes first, refuses with the numbers
  // and names the limit.
  EXPECT_NE(r.output.find("resource_exhausted: emulator"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1152 ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("RLIMIT_AS"), std::string::npos) << r.output;
}

// `scenario run --progress` where no thread can start (pids.max 1): the run
// goes on and says the line follows the items instead of the clock.
TEST(ProgressThread, NoThreadForTheClockIsNotFatal) {
  ENGRAM_SKIP_UNDER_SANITIZERS("LeakSanitizer needs a thread of its own (pids.max=1 leaves none)");
  std::string why;
  auto cgroup = testing::TestCgroup::create("pids", why);
  if (!cgroup) GTEST_SKIP() << "cannot make a pids cgroup here: " << why;
  ASSERT_TRUE(cgroup->set_limit("1"));
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!cgroup->add(::getpid())) ::_exit(3);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[0]);
    const std::string file = kScenarios + "/dp1_resolves_disabled.yaml";
    ::execl(kEngramlab.c_str(), "engramlab", "scenario", "run", "--progress", file.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "died of signal " << WTERMSIG(status) << "\n" << text;
  EXPECT_NE(WEXITSTATUS(status), 3) << "could not join " << cgroup->dir();
  EXPECT_EQ(WEXITSTATUS(status), 0) << text;
  EXPECT_NE(text.find("progress is shown as items finish (no thread for the clock"), std::string::npos) << text;
}

// A token the ranks' fd channel would refuse is refused by the launcher,
// naming the variable, before any rank starts.
TEST(LaunchToken, ATooLongTokenIsRefusedByTheLauncherNamingTheVariable) {
  const ProcessRun r = testing::run("ENGRAMLAB_JOB_TOKEN=" + std::string(300, 'a') + " " + kEngramlab +
                                    " launch -n 2 -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(golden_message("launch.job_token_too_long")), std::string::npos) << r.output;
}

}  // namespace
}  // namespace engram
