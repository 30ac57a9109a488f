#include "apps/launch_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace engram::app {
namespace {

constexpr char kJobEnded = 'e';
// However long the launcher's --grace-ms: the whole job ends within a second
// of the launcher's death.
constexpr int kOrphanGraceMsMax = 500;

// A process of `group` that is not a zombie. kill(-group, 0) would count
// zombies too, and where pid 1 does not reap (some containers) they stay.
bool group_alive(pid_t group) {
  if (::kill(-group, 0) != 0 && errno == ESRCH) return false;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return true;
  bool alive = false;
  while (dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 1));
    char state = 0;
    long parent = 0, pgrp = 0;
    if (fields >> state >> parent >> pgrp && pgrp == group && state != 'Z' && state != 'X') {
      alive = true;
      break;
    }
  }
  ::closedir(proc);
  return alive;
}

// Polls until `group` has no process left or `ms` pass; true when it is gone.
bool wait_for_group(pid_t group, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (group_alive(group)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

[[noreturn]] void run_guard(int pipe_read, pid_t rank_group, int grace_ms, const std::function<void()>& after_orphaned) {
  // Its own process group: the terminal's Ctrl-C and a kill of the
  // launcher's group leave it alone; it answers to the pipe only.
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_IGN);
  // Hold nothing of the launcher's (the ranks' output pipes, its stdout):
  // whoever reads those must see them end with the launcher.
  if (::dup2(pipe_read, 3) != 3) ::_exit(1);
  ::close_range(4, ~0U, 0);
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(null_fd, STDOUT_FILENO);
  }
  char byte = 0;
  ssize_t n = 0;
  do {
    n = ::read(3, &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n == 1 && byte == kJobEnded) ::_exit(0);
  // The launcher died. Its ranks got SIGTERM from the kernel; their children
  // get it now, then SIGKILL after the grace.
  if (group_alive(rank_group)) {
    std::fprintf(stderr, "engramlab launch: the launcher died; stopping its ranks (process group %d)\n",
                 static_cast<int>(rank_group));
    ::kill(-rank_group, SIGTERM);
    if (!wait_for_group(rank_group, std::min(grace_ms, kOrphanGraceMsMax))) {
      ::kill(-rank_group, SIGKILL);
      wait_for_group(rank_group, 1000);  // reaping is init's; bounded
    }
  }
  if (after_orphaned) after_orphaned();
  ::_exit(0);
}

}  // namespace

LaunchGuard::LaunchGuard(pid_t rank_group, int grace_ms, std::function<void()> after_orphaned) {
  int fds[2] = {-1, -1};
  if (rank_group <= 0 || ::pipe2(fds, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "engramlab launch: no guard for the ranks (pipe: %s): if the launcher is killed, its "
                         "ranks' own children may outlive it\n", std::strerror(errno));
    return;
  }
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[1]);
    run_guard(fds[0], rank_group, grace_ms, after_orphaned);
  }
  ::close(fds[0]);
  if (pid < 0) {
    std::fprintf(stderr, "engramlab launch: no guard for the ranks (fork: %s): if the launcher is killed, its "
                         "ranks' own children may outlive it\n", std::strerror(errno));
    ::close(fds[1]);
    return;
  }
  pipe_write_ = fds[1];
  guard_ = pid;
}

void LaunchGuard::job_ended() {
  if (pipe_write_ < 0) return;
  const ssize_t n = ::write(pipe_write_, &kJobEnded, 1);
  (void)n;
  ::close(pipe_write_);
  pipe_write_ = -1;
  ::waitpid(guard_, nullptr, 0);
  guard_ = -1;
}

LaunchGuard::~LaunchGuard() { job_ended(); }

}  // namespace engram::app
