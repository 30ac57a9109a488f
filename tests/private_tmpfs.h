// Whether this process may make a private mount (and UTS) namespace and
// mount a tmpfs in it: root or CAP_SYS_ADMIN, no seccomp filter refusing
// unshare. The one check behind every test that mounts its own /dev/shm or
// shm dir (host_shm_test, real_runtime_test, doctor_host_facts_test), which
// skip, saying why, where it fails.
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace engram::testing {

// Empty where it may; else why not. Tried once a process, in a child.
inline const std::string& why_no_private_tmpfs() {
  static const std::string why = [] {
    if (::geteuid() != 0) return std::string("needs root (unshare --mount --uts, mount -t tmpfs)");
    const pid_t child = ::fork();
    if (child == 0) {
      if (::unshare(CLONE_NEWNS | CLONE_NEWUTS) != 0) ::_exit(1);
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(2);
      ::_exit(::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") == 0 ? 0 : 2);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return std::string();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 1)
      return std::string("unshare(CLONE_NEWNS | CLONE_NEWUTS) is not permitted here (seccomp or missing CAP_SYS_ADMIN)");
    return std::string("mounting a tmpfs in a private mount namespace is not permitted here");
  }();
  return why;
}

}  // namespace engram::testing
