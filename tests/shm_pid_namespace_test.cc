// `engramlab shm clean` and a job in another PID namespace (any container):
// the segment its creator holds survives clean while that creator lives,
// however little its pid means here, and goes once it has died. The creator
// runs as `unshare --pid --fork` starts one, with a pid that no process of
// this namespace has, so a judge that trusted the pid would call it dead.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "backends/shm/posix_shared_memory.h"
#include "tests/engramlab_command.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

namespace fs = std::filesystem;

constexpr int kUnsharePidRefused = 77;
// A name part as a job token gives (core/backend/host_shared_memory.h).
constexpr std::string_view kPart = "0123456789abcdef";

// A pid no process of this namespace has, for the creator to take in its own.
pid_t pid_unused_here() {
  int pid_max = 32768;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  for (pid_t pid = static_cast<pid_t>(pid_max - 1); pid > 300; --pid) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return pid;
  }
  return -1;
}

// The creator: pid 1 of a new PID namespace (what `unshare --pid --fork`
// runs) starts it as pid `wanted` of that namespace where the kernel lets
// it, creates the segment, says so on `ready` and holds it until `hold`
// closes. Returns the outer child's pid.
pid_t start_creator_in_new_pid_namespace(const std::string& dir, const std::string& name, pid_t wanted,
                                         const int (&ready_pipe)[2], const int (&hold_pipe)[2]) {
  const int ready = ready_pipe[1], ready_read = ready_pipe[0];
  const int hold = hold_pipe[0], hold_write = hold_pipe[1];
  const pid_t outer = ::fork();
  if (outer != 0) return outer;
  ::close(ready_read);
  ::close(hold_write);
  if (::unshare(CLONE_NEWPID) != 0) ::_exit(kUnsharePidRefused);
  const pid_t init = ::fork();
  if (init < 0) ::_exit(1);
  if (init == 0) {  // pid 1 there
    if (FILE* last = std::fopen("/proc/sys/kernel/ns_last_pid", "w")) {
      std::fprintf(last, "%d", static_cast<int>(wanted - 1));
      std::fclose(last);
    }
    const pid_t creator = ::fork();
    if (creator == 0) {
      shm::PosixSharedMemory memory({.root_dir = dir});
      auto created = memory.create(name, 1 << 16);
      const int pid_there = ::getpid();
      if (!created.is_ok() || ::write(ready, &pid_there, sizeof pid_there) != sizeof pid_there) ::_exit(2);
      pollfd until_closed{hold, POLLIN, 0};
      ::poll(&until_closed, 1, 60000);  // bounded, so a failed test never leaves it behind
      ::raise(SIGKILL);  // dies holding it, as a crashed container does
    }
    int status = 0;
    ::waitpid(creator, &status, 0);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(init, &status, 0);
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 3);
}

TEST(ShmPidNamespace, ALiveCreatorInAnotherPidNamespaceKeepsItsSegmentThroughClean) {
  char templ[] = "/dev/shm/engramlab-pidns-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  const std::string name = shm::segment_name("pidnsjob", kPart, "layer1");
  const std::string clean = "shm clean --job-id pidnsjob --dir " + dir + " --socket-root " + dir + "/no-sockets";
  const pid_t wanted = pid_unused_here();
  ASSERT_GT(wanted, 0);
  int ready[2], hold[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(hold, O_CLOEXEC), 0);
  const pid_t outer = start_creator_in_new_pid_namespace(dir, name, wanted, ready, hold);
  ASSERT_GT(outer, 0);
  ::close(ready[1]);
  ::close(hold[0]);
  pollfd pfd{ready[0], POLLIN, 0};
  int pid_there = -1;
  const bool started = ::poll(&pfd, 1, 10000) == 1 && ::read(ready[0], &pid_there, sizeof pid_there) == sizeof pid_there;
  if (!started) {
    ::close(hold[1]);
    int status = 0;
    ::waitpid(outer, &status, 0);
    fs::remove_all(dir);
    if (WIFEXITED(status) && WEXITSTATUS(status) == kUnsharePidRefused) {
      GTEST_SKIP() << "unshare(CLONE_NEWPID) is not permitted here (needs CAP_SYS_ADMIN): not tested";
    }
    FAIL() << "the creator in the new PID namespace did not start (status " << status << ")";
  }
  if (pid_there != wanted) {
    std::fprintf(stderr, "note: ns_last_pid not writable; the creator is pid %d there, which may exist here\n",
                 pid_there);
  }

  const testing::CommandOutput while_alive = testing::run_engramlab(clean);
  EXPECT_EQ(while_alive.exit_code, 0) << while_alive.text;
  EXPECT_TRUE(fs::exists(dir + "/" + name)) << "a live job's segment was removed\n" << while_alive.text;
  EXPECT_NE(while_alive.text.find("0 stale segment(s) removed"), std::string::npos) << while_alive.text;
  EXPECT_NE(while_alive.text.find("kept: " + dir + "/" + name), std::string::npos) << while_alive.text;
  EXPECT_NE(while_alive.text.find(golden_message("shm.segment_in_use")), std::string::npos) << while_alive.text;
  EXPECT_NE(while_alive.text.find("in another PID namespace"), std::string::npos) << while_alive.text;
  const testing::CommandOutput listed = testing::run_engramlab("shm list --json --job-id pidnsjob --dir " + dir);
  EXPECT_NE(listed.text.find("\"stale\":false"), std::string::npos) << listed.text;

  ::close(hold[1]);  // the creator dies
  int status = 0;
  ASSERT_EQ(::waitpid(outer, &status, 0), outer);
  const testing::CommandOutput after_death = testing::run_engramlab(clean);
  EXPECT_EQ(after_death.exit_code, 0) << after_death.text;
  EXPECT_FALSE(fs::exists(dir + "/" + name)) << after_death.text;
  EXPECT_NE(after_death.text.find("removed: " + dir + "/" + name), std::string::npos) << after_death.text;
  EXPECT_NE(after_death.text.find("stale: creator gone, no process holds it open"), std::string::npos)
      << after_death.text;
  ::close(ready[0]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace engram
