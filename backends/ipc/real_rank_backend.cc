#include "backends/ipc/real_rank_backend.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace engram::ipc {

Result<RealBackendOptions> real_backend_options(const EnvLookup& env) {
  RealBackendOptions options;
  if (auto dir = env("ENGRAMLAB_SHM_DIR"); dir && !dir->empty()) {
    struct stat st{};
    if (::stat(dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return invalid_argument(fmt::format("ENGRAMLAB_SHM_DIR='{}' is not a directory ({}); point it at a tmpfs "
                                          "mount such as /dev/shm, or unset it",
                                          *dir, std::strerror(errno ? errno : ENOTDIR)));
    options.shm_dir = *dir;
  }
  if (auto dir = env("ENGRAMLAB_SOCKET_DIR"); dir && !dir->empty()) options.socket_dir = *dir;
  if (auto text = env("ENGRAMLAB_OP_TIMEOUT_MS"); text && !text->empty()) {
    char* end = nullptr;
    errno = 0;
    const long ms = std::strtol(text->c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || ms < 1 || ms > 3600 * 1000)
      return invalid_argument(fmt::format("ENGRAMLAB_OP_TIMEOUT_MS='{}' is not a whole number of milliseconds in "
                                          "1..3600000; e.g. ENGRAMLAB_OP_TIMEOUT_MS=5000",
                                          *text));
    options.op_timeout = std::chrono::milliseconds(ms);
    options.join_timeout = std::chrono::milliseconds(2 * ms);
  }
  return options;
}

RealRankBackend::RealRankBackend(LaunchEnv env, RealBackendOptions options)
    : env_(std::move(env)), options_(std::move(options)), shm_({.root_dir = options_.shm_dir}) {}

Result<std::unique_ptr<RealRankBackend>> RealRankBackend::create(const LaunchEnv& env,
                                                                 const RealBackendOptions& options) {
  ENGRAM_CHECK(env.rank >= 0 && env.rank < env.world_size);
  std::unique_ptr<RealRankBackend> self(new RealRankBackend(env, options));
  const int me = env.rank;

  if (env.local_rank == 0) {
    auto removed = shm::remove_stale_segments(options.shm_dir, shm::job_segment_prefix(env.job_id));
    // No shm directory: nothing stale; creating a segment reports it if one is needed.
    if (!removed.is_ok() && removed.status().code() == ErrorCode::kNotFound) removed = std::vector<shm::SegmentRecord>{};
    if (!removed.is_ok())
      return std::move(removed).take_status().with_context(me, -1, "stale segment cleanup");
    self->stale_removed_ = std::move(removed).value();
  }

  // The fd channel listens before the rendezvous, so every peer's socket
  // exists once the job has met.
  FdChannelOptions fd_options{.rank = me, .world_size = env.world_size, .job_id = env.job_id,
                              .job_token = env.job_token, .socket_dir = options.socket_dir};
  fd_options.deadline = options.op_timeout;
  auto fds = UnixFdChannel::open(fd_options);
  if (!fds.is_ok()) return std::move(fds).take_status().with_context(me, -1, "fd channel");
  self->fds_ = std::move(fds).value();

  TcpCollectivesOptions world_options = collectives_options(env);
  world_options.op_timeout = options.op_timeout;
  world_options.join_timeout = options.join_timeout;
  auto world = TcpCollectives::join(world_options);
  if (!world.is_ok()) return std::move(world).take_status().with_context(me, -1, "rendezvous");
  self->world_ = std::move(world).value();

  RankBackend& b = self->backend_;
  b.world_rank = me;
  b.world_size = env.world_size;
  b.world = self->world_.get();
  b.device = nullptr;
  b.fds = self->fds_.get();
  b.shm = &self->shm_;
  b.probe = &self->probe_;
  return self;
}

std::vector<Warning> RealRankBackend::stale_warnings() const {
  std::vector<Warning> out;
  for (const shm::SegmentRecord& r : stale_removed_)
    out.push_back({"shm.stale_segment_removed:" + r.name,
                   fmt::format("removed a stale /dev/shm segment left by an earlier run of job {}: {}", env_.job_id,
                               r.describe())});
  return out;
}

}  // namespace engram::ipc
