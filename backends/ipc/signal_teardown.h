// What a rank removes when SIGTERM, SIGINT or SIGHUP ends it: the files it
// made that outlive the process (its /dev/shm segments, its Unix socket) and
// the directories it made for them once they are empty. A launcher forwards
// those signals, and a rank whose launcher died gets SIGTERM
// (PR_SET_PDEATHSIG), so a job stopped either way leaves nothing behind.
// The handler only unlinks, rmdirs and (to put a marker back) creates the
// paths registered here (all async-signal-safe), then dies of the signal as
// it would have: unmapping is the kernel's at exit. Only SIGKILL gets past
// it; `shm clean` is for that.
#pragma once

#include <string>

namespace engram::ipc {

// kMarkedDirectory: the path is a marker file that says engramlab made its
// directory (the socket directories'): the marker is removed and the
// directory with it when nothing else is there; a directory another job
// still uses gets its marker back, so the last one out still removes it.
enum class TeardownKind { kFile, kMarkedDirectory };

// A path removed if a termination signal ends the process while this lives.
// Forget it (destroy it) once the path is gone or handed on.
class TeardownPath {
 public:
  TeardownPath() = default;
  TeardownPath(const std::string& path, TeardownKind kind);
  ~TeardownPath();
  TeardownPath(TeardownPath&& other) noexcept;
  TeardownPath& operator=(TeardownPath&& other) noexcept;
  TeardownPath(const TeardownPath&) = delete;
  TeardownPath& operator=(const TeardownPath&) = delete;

 private:
  int slot_ = -1;  // -1: nothing registered (the table was full, or moved from)
};

// Installs the handler for SIGTERM, SIGINT and SIGHUP, once per process; a
// signal this process ignores (nohup) stays ignored, and one with a handler
// of its own keeps it.
void tear_down_on_termination_signals();

}  // namespace engram::ipc
