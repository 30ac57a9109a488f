#include "backends/ipc/host_facts_probe.h"

#include "backends/ipc/proc_host_probe.h"
#include "backends/shm/memory_cgroup.h"
#include "backends/shm/posix_shared_memory.h"

namespace engram::ipc {

void probe_host_facts(const HostFactsProbeOptions& options, ObservedHost& out) {
  const PlacementFacts placement = ProcHostProbe(options.imex_channel_dir).facts();
  out.hostname = placement.host.hostname.empty() ? "(uname failed)" : placement.host.hostname;
  out.boot_id = placement.host.boot_id.empty() ? "(unreadable)" : placement.host.boot_id;
  out.environment = placement.environment;
  out.shm_dir = options.shm_dir;
  auto shm = shm::PosixSharedMemory(shm::PosixSharedMemoryOptions{options.shm_dir}).info();
  if (shm.is_ok()) {
    out.shm_mounted = shm->mounted;
    out.shm_not_tmpfs = shm->not_tmpfs;
    out.shm_total_bytes = shm->tmpfs_bytes_total;
    out.shm_free_bytes = shm->tmpfs_bytes_free;
  } else {
    out.shm_not_tmpfs = shm.status().message();
  }
  out.imex_channels = imex_channels(options.imex_channel_dir);
  out.host_memory_bytes = read_mem_total_bytes();
  // An unreadable limit is no limit known here; the /dev/shm fill reports
  // it where it matters (core/backend/shm_fill_limits.h).
  if (auto cgroup = shm::this_process_memory_cgroup(); cgroup.is_ok() && cgroup->has_value()) {
    out.memory_limit_bytes = (*cgroup)->limit_bytes;
    out.memory_limit_cgroup = (*cgroup)->path;
  }
}

}  // namespace engram::ipc
