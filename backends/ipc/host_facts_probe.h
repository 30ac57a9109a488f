// The host part of what a real host is (core/deployment/observed_host.h), as
// the backends read it for a real run, so `doctor` and the bridge judge the
// machine the runtime sees: the identity and environment the rank's host
// probe reports (proc_host_probe.h), /dev/shm as the real shared memory reads
// it (a plain directory is no tmpfs), the IMEX channels, MemTotal and the
// memory cgroup that limits this process (backends/shm/memory_cgroup.h).
// The GPUs are the CUDA backend's (backends/cuda/gpu_facts_probe.h).
#pragma once

#include <string>

#include "backends/ipc/imex_channels.h"
#include "core/deployment/observed_host.h"

namespace engram::ipc {

struct HostFactsProbeOptions {
  std::string shm_dir = "/dev/shm";  // ENGRAMLAB_SHM_DIR where a real run uses another
  std::string imex_channel_dir = kImexChannelDir;
};

// Fills `out`'s host fields; never fails (what cannot be read is said in
// the fields: "(uname failed)", shm_not_tmpfs, an empty host_memory_bytes).
void probe_host_facts(const HostFactsProbeOptions& options, ObservedHost& out);

}  // namespace engram::ipc
