// The directory a job's fd-channel sockets live in, made safe on a host
// other users share. Every component of its path is opened with openat and
// O_NOFOLLOW from "/" down and checked: the system part (/, /tmp, /run/user/N)
// must belong to root or us and, when others may write it, be sticky; our
// part (the per-user root and the job's directory) must be real directories
// of ours with mode 0700, created 0700 where missing. A squatted path (a
// file, a symlink, another user's directory) is refused naming what is there
// and how to get around it. The directories engramlab created (they hold
// kSocketDirMarker) are removed when the last rank leaves, whether the run
// passed or failed; `shm clean` sweeps those a killed job left
// (sweep_stale_socket_dirs). A directory the user made is never removed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/ipc/signal_teardown.h"
#include "core/base/status.h"

namespace engram::ipc {

// $XDG_RUNTIME_DIR/engramlab when XDG_RUNTIME_DIR is set (the runtime
// directory the system gives the user); else /run/engramlab for root (only
// root may write /run); else /tmp/engramlab-<uid>.
std::string default_socket_root();
// <default_socket_root()>/<job_id>.
std::string default_socket_dir(const std::string& job_id);

class SocketDir {
 public:
  // Opens `path`, creating missing components (0700). The last
  // `private_components` components must be ours with mode 0700; the ones
  // above them must be trusted (see the file comment). Every error is
  // permission_denied or failed_precondition naming the component.
  // `remove_when_empty` false: a directory that was there before the job,
  // left in place however it ends.
  static Result<std::unique_ptr<SocketDir>> open(const std::string& path, int private_components,
                                                 bool remove_when_empty = true);
  // The job's default directory: the per-user root and the job's directory are private.
  static Result<std::unique_ptr<SocketDir>> open_default(const std::string& job_id);

  // Removes the private components it created that hold only the marker
  // by then (another rank's socket keeps them for that rank to remove).
  ~SocketDir();
  SocketDir(const SocketDir&) = delete;
  SocketDir& operator=(const SocketDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  SocketDir() = default;
  std::string path_;
  std::vector<std::string> private_paths_;  // deepest last
  std::vector<TeardownPath> teardown_;      // the same, rmdir'ed (when empty) if a signal ends us
};

// Unlinks the rank sockets in `job_dir` that nobody listens on any more
// (what SIGKILLed ranks left), so the last rank out can remove the
// directory. Anything else in it is left alone.
void remove_dead_rank_sockets(const std::string& job_dir);
// After a job: its dead sockets, then `job_dir` itself if engramlab made it
// (the marker) and nothing else is left in it.
void remove_ended_job_dir(const std::string& job_dir);

struct SweptSocketDir {
  std::string path;
  std::string outcome;  // "removed: ..." or "kept: ..."
  bool removed = false;
};

// Every directory SocketDir creates holds this empty file: only a directory
// that holds it (or rank-N.sock sockets) is one engramlab may remove.
inline constexpr const char* kSocketDirMarker = ".engramlab-socket-dir";

// Under `root` (a per-user socket root), removes each job directory whose
// rank sockets nobody listens on any more (or that holds only our marker and
// is older than a few seconds), then `root` itself when it holds only our
// marker. Anything else is never removed: a directory holding other entries,
// or empty without the marker, is kept and reported, and so is a root that
// engramlab did not make. A missing root is nothing to sweep. `only_job`,
// when given, limits it to exactly that job's directory.
Result<std::vector<SweptSocketDir>> sweep_stale_socket_dirs(const std::string& root, const std::string& only_job = "");

}  // namespace engram::ipc
