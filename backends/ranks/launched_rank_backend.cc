#include "backends/ranks/launched_rank_backend.h"

#include <fmt/format.h>

namespace engram::ranks {

Result<std::unique_ptr<LaunchedRankBackend>> LaunchedRankBackend::create(const ipc::LaunchEnv& env,
                                                                         int ranks_per_gpu, WarningSink& sink) {
  ENGRAM_ASSIGN_OR_RETURN(ipc::RealBackendOptions options, ipc::real_backend_options(ipc::process_env()));
  // Every rank looks up on its own GPU, whatever its placement.
  return create(env, options, true, ranks_per_gpu, sink);
}

Result<std::unique_ptr<LaunchedRankBackend>> LaunchedRankBackend::create(const ipc::LaunchEnv& env,
                                                                         const ipc::RealBackendOptions& options,
                                                                         bool device_wanted, int ranks_per_gpu,
                                                                         WarningSink& sink) {
  ENGRAM_CHECK(ranks_per_gpu >= 1);
  std::unique_ptr<LaunchedRankBackend> out(new LaunchedRankBackend());
  ENGRAM_ASSIGN_OR_RETURN(out->real_, ipc::RealRankBackend::create(env, options));
  for (const Warning& w : out->real_->stale_warnings()) sink.emit(w);
  out->backend_ = out->real_->backend();
  // After the rendezvous: a rank that cannot open its GPU fails the job's
  // first collective at once instead of holding the others at the join.
  ENGRAM_ASSIGN_OR_RETURN(out->device_, open_rank_device(env.local_rank, env.rank, device_wanted,
                                                         *out->backend_.probe, ranks_per_gpu));
  if (out->device_.memory) {
    out->backend_.device = out->device_.memory.get();
    out->backend_.compute = out->device_.compute.get();
    out->backend_.probe = out->device_.probe.get();
  }
  return out;
}

Result<ParallelLayout> launched_layout(int tp, int dp, int world_size, const std::string& tp_name,
                                       const std::string& dp_name) {
  if (tp == 0 && dp > 0) tp = world_size / dp;
  if (dp == 0 && tp > 0) dp = world_size / tp;
  if (tp < 1 || dp < 1 || static_cast<int64_t>(tp) * dp != world_size)
    return invalid_argument(fmt::format("{} {} x {} {} is not the {} ranks the launcher started; make tp x dp = {}",
                                        tp_name, tp, dp_name, dp, world_size, world_size));
  return ParallelLayout{tp, dp};
}

}  // namespace engram::ranks
