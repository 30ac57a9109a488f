#include "backends/ipc/real_rank_backend.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backends/ipc/signal_teardown.h"
#include "core/base/text_excerpt.h"
#include "core/base/units.h"

namespace engram::ipc {

Result<RealBackendOptions> real_backend_options(const EnvLookup& env) {
  RealBackendOptions options;
  if (auto dir = env("ENGRAMLAB_SHM_DIR"); dir && !dir->empty()) {
    // The directory is echoed in reports and errors: no control characters.
    if (has_control_characters(*dir) || dir->size() > kEchoedValueBytes) {
      return invalid_argument(fmt::format("ENGRAMLAB_SHM_DIR='{}' is not a usable directory name (control characters, "
                                          "or longer than {} bytes); point it at a tmpfs mount such as /dev/shm",
                                          excerpt(*dir), kEchoedValueBytes));
    }
    struct stat st{};
    if (::stat(dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return invalid_argument(fmt::format("ENGRAMLAB_SHM_DIR='{}' is not a directory ({}); point it at a tmpfs "
                                          "mount such as /dev/shm, or unset it",
                                          excerpt(*dir, kEchoedValueBytes), std::strerror(errno ? errno : ENOTDIR)));
    // Segments are created there and opened by the peers after the fill: a
    // directory another user owns, or may write without the sticky bit, lets
    // that user replace them in between.
    if (st.st_uid != ::geteuid() && st.st_uid != 0)
      return invalid_argument(fmt::format("ENGRAMLAB_SHM_DIR='{}' is owned by uid {}, another user (you are uid {}), "
                                          "who could replace the job's segments between the fill and the peers' open; "
                                          "use a directory of your own or /dev/shm",
                                          excerpt(*dir, kEchoedValueBytes), st.st_uid, ::geteuid()));
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
      return invalid_argument(fmt::format("ENGRAMLAB_SHM_DIR='{}' may be written by other users (mode {:04o}, no sticky "
                                          "bit), who could replace the job's segments between the fill and the peers' "
                                          "open; chmod go-w it, or chmod +t it as /dev/shm is",
                                          excerpt(*dir, kEchoedValueBytes), st.st_mode & 07777));
    options.shm_dir = *dir;
  }
  if (auto dir = env("ENGRAMLAB_SOCKET_DIR"); dir && !dir->empty()) options.socket_dir = *dir;
  options.keep_socket_dir = env("ENGRAMLAB_SOCKET_DIR_KEEP").value_or("") == "1";
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
  if (auto text = env("ENGRAMLAB_HOST_MEMORY"); text && !text->empty()) {
    ENGRAM_ASSIGN_OR_RETURN(const uint64_t bytes, parse_bytes(*text, "ENGRAMLAB_HOST_MEMORY"));
    if (bytes == 0)
      return invalid_argument("ENGRAMLAB_HOST_MEMORY='0B' is no memory; give the RAM the rank stands for (e.g. 2TiB), or "
                              "unset it for MemTotal");
    options.host_memory_bytes = bytes;
  }
  return options;
}

RealRankBackend::RealRankBackend(LaunchEnv env, RealBackendOptions options)
    : env_(std::move(env)),
      options_(std::move(options)),
      shm_({.root_dir = options_.shm_dir}),
      probe_(kImexChannelDir, options_.host_memory_bytes) {}

Result<std::unique_ptr<RealRankBackend>> RealRankBackend::create(const LaunchEnv& env,
                                                                 const RealBackendOptions& options) {
  ENGRAM_CHECK(env.rank >= 0 && env.rank < env.world_size);
  // A rank stopped by its launcher (or orphaned: PR_SET_PDEATHSIG) removes
  // its segments and socket before it dies.
  tear_down_on_termination_signals();
  std::unique_ptr<RealRankBackend> self(new RealRankBackend(env, options));
  const int me = env.rank;

  if (env.local_rank == 0) {
    auto removed = shm::remove_stale_segments(options.shm_dir, shm::SegmentScope::of_job(env.job_id));
    // No shm directory: nothing stale; creating a segment reports it if one is needed.
    if (!removed.is_ok() && removed.status().code() == ErrorCode::kNotFound) removed = std::vector<shm::SegmentRecord>{};
    if (!removed.is_ok())
      return std::move(removed).take_status().with_context(me, -1, "stale segment cleanup");
    self->stale_removed_ = std::move(removed).value();
  }

  // The fd channel listens before the rendezvous, so every peer's socket
  // exists once the job has met.
  FdChannelOptions fd_options{.rank = me, .world_size = env.world_size, .job_id = env.job_id,
                              .job_token = env.job_token, .socket_dir = options.socket_dir,
                              .keep_socket_dir = options.keep_socket_dir};
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
  ENGRAM_RETURN_IF_ERROR(self->tell_fd_channel_the_hosts());

  RankBackend& b = self->backend_;
  b.world_rank = me;
  b.world_size = env.world_size;
  b.world = self->world_.get();
  b.device = nullptr;
  b.fds = self->fds_.get();
  b.shm = &self->shm_;
  b.memfd = &self->memfd_;
  b.probe = &self->probe_;
  return self;
}

Status RealRankBackend::tell_fd_channel_the_hosts() {
  // Fixed-size records, so one all-gather carries them; a rank that cannot
  // read its identity sends an empty one and the channel is told nothing.
  struct Record {
    char hostname[72];
    char boot_id[56];
  };
  static_assert(sizeof(Record) == 128);
  Record mine{};
  auto id = read_host_identity();
  const bool known = id.is_ok() && id->hostname.size() < sizeof(mine.hostname) && !id->hostname.empty() &&
                     id->boot_id.size() < sizeof(mine.boot_id);
  if (known) {
    std::memcpy(mine.hostname, id->hostname.data(), id->hostname.size());
    std::memcpy(mine.boot_id, id->boot_id.data(), id->boot_id.size());
  }
  std::vector<Record> records(static_cast<size_t>(env_.world_size));
  Status gathered = world_->all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(records)));
  if (!gathered.is_ok()) return std::move(gathered).with_context(env_.rank, -1, "host identities");
  std::vector<HostIdentity> hosts;
  for (const Record& r : records) {
    HostIdentity host{std::string(r.hostname, ::strnlen(r.hostname, sizeof(r.hostname))),
                      std::string(r.boot_id, ::strnlen(r.boot_id, sizeof(r.boot_id)))};
    if (host.hostname.empty()) return Status::ok();
    hosts.push_back(std::move(host));
  }
  fds_->set_peer_hosts(std::move(hosts));
  return Status::ok();
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
