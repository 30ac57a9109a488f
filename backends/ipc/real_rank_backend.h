// The RankBackend of one real process, from the launcher's environment
// (`engramlab launch`, torchrun, srun): token-checked TCP collectives, the
// Unix-socket fd channel, /dev/shm (or ENGRAMLAB_SHM_DIR) and the /proc host
// probe. No device: the CUDA backend is separate.
//
// Before the job's first collective, local rank 0 of each host removes this
// job's segments whose creator is gone (a crashed earlier run with the same
// job id) and keeps the list so the caller can warn. Segments whose creator
// still runs are never touched. No rank of this job can have created a
// segment yet: creation happens after the runtime's first all_gather, which
// needs local rank 0.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/ipc/launch_env.h"
#include "backends/ipc/proc_host_probe.h"
#include "backends/ipc/tcp_collectives.h"
#include "backends/ipc/unix_fd_channel.h"
#include "backends/memfd/proc_fd_shared_memory.h"
#include "backends/shm/posix_shared_memory.h"
#include "backends/shm/stale_segments.h"
#include "core/backend/rank_backend.h"
#include "core/base/status.h"
#include "core/base/warnings.h"

namespace engram::ipc {

struct RealBackendOptions {
  std::string shm_dir = "/dev/shm";   // ENGRAMLAB_SHM_DIR
  std::string socket_dir;             // ENGRAMLAB_SOCKET_DIR; empty: default_socket_dir(job_id)
  bool keep_socket_dir = false;       // ENGRAMLAB_SOCKET_DIR_KEEP=1: it was there before the job
  std::chrono::milliseconds op_timeout{60000};    // ENGRAMLAB_OP_TIMEOUT_MS: one collective / fd operation
  std::chrono::milliseconds join_timeout{30000};  // every rank at the rendezvous
  // ENGRAMLAB_HOST_MEMORY: the RAM the memory fit judges by instead of
  // MemTotal, where a run stands for another host (a scenario's rank takes
  // its scenario host's host_memory where this is not given).
  std::optional<uint64_t> host_memory_bytes;
};

// Reads ENGRAMLAB_SHM_DIR, ENGRAMLAB_SOCKET_DIR, ENGRAMLAB_OP_TIMEOUT_MS and ENGRAMLAB_HOST_MEMORY
// over the defaults; a bad value is invalid_argument naming the variable.
Result<RealBackendOptions> real_backend_options(const EnvLookup& env);

class RealRankBackend {
 public:
  // Steps, each named in its error: "launch environment", "stale segment
  // cleanup", "fd channel", "rendezvous", "host identities".
  static Result<std::unique_ptr<RealRankBackend>> create(const LaunchEnv& env, const RealBackendOptions& options);

  RankBackend& backend() { return backend_; }
  const LaunchEnv& env() const { return env_; }
  const RealBackendOptions& options() const { return options_; }
  // What local rank 0 removed before the job began (empty elsewhere).
  const std::vector<shm::SegmentRecord>& stale_removed() const { return stale_removed_; }
  // One warning per removed segment, key "shm.stale_segment_removed".
  std::vector<Warning> stale_warnings() const;

 private:
  RealRankBackend(LaunchEnv env, RealBackendOptions options);
  // All-gathers every rank's host identity after the rendezvous, so the fd
  // channel's errors can say whether a peer is on this host.
  Status tell_fd_channel_the_hosts();

  LaunchEnv env_;
  RealBackendOptions options_;
  std::vector<shm::SegmentRecord> stale_removed_;
  std::unique_ptr<UnixFdChannel> fds_;
  std::unique_ptr<TcpCollectives> world_;
  shm::PosixSharedMemory shm_;
  memfd::ProcFdSharedMemory memfd_;
  ProcHostProbe probe_;
  RankBackend backend_;
};

}  // namespace engram::ipc
