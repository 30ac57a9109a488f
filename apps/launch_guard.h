// What ends a job whose `engramlab launch` died without ending it (SIGKILL, a
// crash, the OOM killer). The ranks' PR_SET_PDEATHSIG sends them SIGTERM, so
// each tears down (backends/ipc/signal_teardown.h); but a rank's own children
// have no such link, and a rank that ignores SIGTERM would run on. The guard,
// a process of its own forked by the launcher, notices the launcher's end
// (its pipe closes), gives the ranks' process group a short grace, SIGKILLs
// what is left of it, and runs the launcher's end-of-job cleanup.
#pragma once

#include <sys/types.h>

#include <functional>

namespace engram::app {

class LaunchGuard {
 public:
  // Starts the guard for the process group `rank_group`. `after_orphaned`
  // runs in the guard once the group is gone (only when the launcher died).
  // Without a guard (fork failed) the launcher still works: it says so.
  LaunchGuard(pid_t rank_group, int grace_ms, std::function<void()> after_orphaned);
  // The launcher ended the job itself: the guard exits without acting.
  void job_ended();
  ~LaunchGuard();
  LaunchGuard(const LaunchGuard&) = delete;
  LaunchGuard& operator=(const LaunchGuard&) = delete;

 private:
  int pipe_write_ = -1;  // its closing without job_ended() is the guard's cue
  pid_t guard_ = -1;
};

}  // namespace engram::app
