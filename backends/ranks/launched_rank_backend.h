// One rank of a launched job (`engramlab launch`, torchrun, srun, mpirun;
// backends/ipc/launch_env.h) as a process holds it for as long as it runs:
// the real backend from the launcher's environment and, where a GPU is
// visible, the rank's own (LOCAL_RANK / ranks_per_gpu) opened on top. Used by
// the commands every rank of a job runs (acceptance, bench) and by the
// Python module's EngramTables.
#pragma once

#include <memory>
#include <string>

#include "backends/ipc/launch_env.h"
#include "backends/ipc/real_rank_backend.h"
#include "core/backend/rank_backend.h"
#include "core/base/status.h"
#include "core/base/warnings.h"
#include "core/deployment/deployment.h"
#include "backends/ranks/rank_device.h"

namespace engram::ranks {

class LaunchedRankBackend {
 public:
  // Reads ENGRAMLAB_SHM_DIR, ENGRAMLAB_SOCKET_DIR and ENGRAMLAB_OP_TIMEOUT_MS
  // (ipc::real_backend_options), meets the other ranks (collective over the
  // job) and opens the GPU. Stale-segment warnings go to `sink`.
  static Result<std::unique_ptr<LaunchedRankBackend>> create(const ipc::LaunchEnv& env, int ranks_per_gpu,
                                                             WarningSink& sink);
  // The same with the options given (the real-process scenario rank sets its
  // host's memory) and the GPU opened only where `device_wanted` (a rank
  // placed on the device: a missing GPU of its own is then an error).
  static Result<std::unique_ptr<LaunchedRankBackend>> create(const ipc::LaunchEnv& env,
                                                             const ipc::RealBackendOptions& options,
                                                             bool device_wanted, int ranks_per_gpu, WarningSink& sink);

  RankBackend& backend() { return backend_; }
  const ipc::LaunchEnv& env() const { return real_->env(); }
  // The CUDA ordinal this rank looks up on; -1 with gpu_none_reason() when it has none.
  int gpu_ordinal() const { return device_.ordinal; }
  const std::string& gpu_none_reason() const { return device_.none_reason; }

 private:
  LaunchedRankBackend() = default;
  // Declared in this order so the device goes before the backend it sits on.
  std::unique_ptr<ipc::RealRankBackend> real_;
  RankDevice device_;
  RankBackend backend_;
};

// tp x dp for a job of `world_size` ranks; 0 for one of them is world_size
// divided by the other. invalid_argument naming `tp_name` and `dp_name` (the
// caller's spelling: "--tp", "tp=") when they do not make the job.
Result<ParallelLayout> launched_layout(int tp, int dp, int world_size, const std::string& tp_name,
                                       const std::string& dp_name);

}  // namespace engram::ranks
