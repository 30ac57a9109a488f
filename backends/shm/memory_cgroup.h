// The memory cgroup this process is charged to (v2 unified or v1 memory
// controller), read from /proc/self/cgroup and /proc/self/mountinfo: the
// tightest limit on the way to the root and the usage under it. Tmpfs pages a
// process writes are charged there (core/backend/shm_fill_limits.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/base/status.h"

namespace engram::shm {

struct MemoryCgroup {
  std::string path;          // the directory of the limiting cgroup, e.g. /sys/fs/cgroup/memory/job
  uint64_t limit_bytes = 0;  // its limit
  uint64_t usage_bytes = 0;  // charged to it now
  uint64_t headroom_bytes() const { return usage_bytes >= limit_bytes ? 0 : limit_bytes - usage_bytes; }
};

// The limiting memory cgroup of this process, or nullopt when none limits it
// (or no memory controller is mounted). Errors only for unreadable files
// that say a limit exists.
Result<std::optional<MemoryCgroup>> this_process_memory_cgroup();

}  // namespace engram::shm
