#include "backends/ipc/fd_limit.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/base/check.h"

namespace engram::ipc {
namespace {

std::string limit_text(uint64_t value) { return value == RLIM_INFINITY ? "unlimited" : std::to_string(value); }

std::string limit_and_fix(const FdLimit& limit) {
  const uint64_t open = open_fd_count();  // 0: not even /proc/self/fd could be opened
  return fmt::format("RLIMIT_NOFILE is {} (hard {}), {}; raise it before the launcher starts (`ulimit -n "
                     "65536`; docker run --ulimit nofile=65536:65536; LimitNOFILE= in a systemd unit)",
                     limit_text(limit.soft), limit_text(limit.hard),
                     open > 0 ? fmt::format("{} open now", open) : std::string("every one of them open"));
}

}  // namespace

FdLimit fd_limit() {
  struct rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return {};
  return {rl.rlim_cur, rl.rlim_max};
}

FdLimit raise_fd_limit() {
  struct rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return {};
  rlim_t target = rl.rlim_max;
  if (target == RLIM_INFINITY) {
    uint64_t nr_open = 1 << 20;  // the kernel's default fs.nr_open
    std::ifstream("/proc/sys/fs/nr_open") >> nr_open;
    target = nr_open;
  }
  if (target > rl.rlim_cur) {
    struct rlimit raised = rl;
    raised.rlim_cur = target;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return {rl.rlim_cur, rl.rlim_max};
}

uint64_t open_fd_count() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint64_t n = 0;
  while (dirent* entry = ::readdir(dir))
    if (entry->d_name[0] != '.') ++n;
  ::closedir(dir);
  return n > 0 ? n - 1 : 0;  // the opendir's own
}

Status check_fds_available(uint64_t needed, const std::string& what) {
  const FdLimit limit = fd_limit();
  if (limit.soft == RLIM_INFINITY || limit.soft == 0) return Status::ok();
  const uint64_t open = open_fd_count();
  if (open + needed <= limit.soft) return Status::ok();
  return resource_exhausted(fmt::format("too few file descriptors: {} needs {} more; {}", what, needed,
                                        limit_and_fix(limit)));
}

Status fd_exhausted(const std::string& what, const std::string& cause) {
  return resource_exhausted(fmt::format("out of file descriptors: {} ({}); {}", what, cause, limit_and_fix(fd_limit())));
}

Status open_failed(int err, const std::string& what) {
  ENGRAM_CHECK(err != 0);
  if (err == EMFILE || err == ENFILE) return fd_exhausted("cannot open " + what, std::strerror(err));
  return failed_precondition(fmt::format("cannot open {}: {}", what, std::strerror(err)));
}

}  // namespace engram::ipc
