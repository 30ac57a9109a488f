#include "backends/shm/segment_liveness.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace engram::shm {
namespace {

std::string creator_text(const SegmentHeader& header) {
  const uint64_t ours = this_pid_namespace();
  if (header.creator_pid_namespace == 0 || header.creator_pid_namespace == ours) {
    return fmt::format("creator pid {}", header.creator_pid);
  }
  return fmt::format("creator pid {} in another PID namespace, pid:[{}], not this one's pid:[{}]", header.creator_pid,
                     header.creator_pid_namespace, ours);
}

}  // namespace

bool hold_segment_lock(int fd) {
  struct flock lock{};
  lock.l_type = F_RDLCK;
  lock.l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file
  return ::fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

SegmentVerdict judge_segment(int fd, const SegmentHeader& header) {
  const std::string creator = creator_text(header);
  // A lock cannot outlive a reboot, and neither can a creator.
  if (std::strncmp(header.creator_boot_id, this_boot_id().c_str(), sizeof(header.creator_boot_id)) != 0) {
    return {SegmentUse::kUnused, fmt::format("stale: creator gone, made before this machine last booted ({})", creator)};
  }
  if (header.holder_lock != kHolderLockOfd) {
    return {SegmentUse::kUnknown,
            fmt::format("kept: its maker held no lock on it, so whether it is in use cannot be proven ({}; a pid "
                        "means nothing across PID namespaces); remove it by hand once no job uses it",
                        creator)};
  }
  struct flock probe{};
  probe.l_type = F_WRLCK;  // conflicts with any holder's read lock
  probe.l_whence = SEEK_SET;
  if (::fcntl(fd, F_OFD_GETLK, &probe) != 0) {
    return {SegmentUse::kUnknown,
            fmt::format("kept: cannot test its lock ({}; {})", std::strerror(errno), creator)};
  }
  if (probe.l_type != F_UNLCK) {
    return {SegmentUse::kInUse, fmt::format("in use: a live process holds it open ({})", creator)};
  }
  return {SegmentUse::kUnused, fmt::format("stale: creator gone, no process holds it open ({})", creator)};
}

}  // namespace engram::shm
