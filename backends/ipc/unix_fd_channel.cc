#include "backends/ipc/unix_fd_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/ipc/fd_limit.h"
#include "backends/ipc/job_token.h"
#include "backends/ipc/launch_env.h"
#include "backends/ipc/wire.h"

namespace engram::ipc {
namespace {

using Clock = std::chrono::steady_clock;
using local = boost::asio::local::stream_protocol;

constexpr uint32_t kHelloMagic = 0x45464431;  // "EFD1"
constexpr uint32_t kProtocolVersion = 1;
constexpr size_t kMaxTokenBytes = kMaxJobTokenBytes;
constexpr size_t kMaxHeaderBytes = 64 * 1024;

struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t src_rank;
  int32_t dst_rank;
  uint32_t token_bytes;
  uint32_t header_bytes;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

// True when `fd` is ready before the deadline.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

void close_all(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

// Reads exactly n bytes; any fds that ride along land in `fds` (the caller
// closes those it does not want). Errors are plain text for the caller to frame.
bool recv_exact(int fd, void* buf, size_t n, Clock::time_point deadline, std::vector<int>& fds, std::string& why) {
  auto* out = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    if (!wait_ready(fd, POLLIN, deadline)) {
      why = "timed out";
      return false;
    }
    iovec iov{out + got, n - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t r = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      why = std::strerror(errno);
      return false;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int received;
          std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          fds.push_back(received);
        }
      }
    }
    if (r == 0) {
      why = "end of file (the sender closed the connection)";
      return false;
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

// Sends all bytes; `pass_fd` (if >= 0) rides on the first chunk.
bool send_all(int fd, const void* buf, size_t n, int pass_fd, Clock::time_point deadline, std::string& why) {
  const auto* in = static_cast<const char*>(buf);
  size_t sent = 0;
  while (sent < n) {
    if (!wait_ready(fd, POLLOUT, deadline)) {
      why = "timed out";
      return false;
    }
    iovec iov{const_cast<char*>(in + sent), n - sent};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (pass_fd >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    const ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      why = std::strerror(errno);
      return false;
    }
    sent += static_cast<size_t>(w);
    pass_fd = -1;  // sent with the first bytes that went out
  }
  return true;
}

bool peer_uid(int fd, uid_t& uid, pid_t& pid) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  uid = cred.uid;
  pid = cred.pid;
  return true;
}

}  // namespace

struct UnixFdChannel::Impl {
  boost::asio::io_context io;
  local::acceptor acceptor{io};
};

std::string fd_socket_path(const std::string& socket_dir, int rank) {
  return socket_dir + "/rank-" + std::to_string(rank) + ".sock";
}

Status check_peer_socket_path(const std::string& job_dir, const std::string& socket_path) {
  auto refuse = [&](const std::string& why) {
    return permission_denied("refusing to send an fd to " + socket_path + ": " + why +
                             "; a rank sends only to sockets in its job's own directory" +
                             (job_dir.empty() ? std::string() : " (" + job_dir + ")"));
  };
  if (job_dir.empty() || job_dir[0] != '/') return refuse("the job's socket directory is not an absolute path");
  if (job_dir.size() > 1 && job_dir.back() == '/') return refuse("the job's socket directory ends in /");
  for (size_t at = 0; at < job_dir.size();) {
    const size_t slash = job_dir.find('/', at);
    const std::string part = job_dir.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    if (part == "." || part == "..") return refuse("the job's socket directory holds '" + part + "'");
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  const std::string prefix = job_dir + "/";
  if (socket_path.compare(0, prefix.size(), prefix) != 0) return refuse("it lies outside " + job_dir);
  const std::string name = socket_path.substr(prefix.size());
  const std::string digits = name.size() > 10 ? name.substr(5, name.size() - 10) : "";
  const bool rank_name = name.starts_with("rank-") && name.ends_with(".sock") && !digits.empty() &&
                         digits.find_first_not_of("0123456789") == std::string::npos;
  if (!rank_name) return refuse("'" + name + "' is not a rank socket name (rank-<r>.sock)");
  struct stat st{};
  if (::lstat(socket_path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    return refuse(S_ISLNK(st.st_mode) ? "it is a symlink" : "it is not a socket");
  }
  return Status::ok();
}

UnixFdChannel::UnixFdChannel(FdChannelOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

UnixFdChannel::~UnixFdChannel() {
  boost::system::error_code ignored;
  if (impl_->acceptor.is_open()) {
    impl_->acceptor.close(ignored);
    ::unlink(socket_path_.c_str());
    socket_teardown_ = TeardownPath();
  }
  for (auto& [rank, fds] : queued_) {
    for (auto& received : fds) ::close(received.fd);
  }
  // Sockets of ranks that were killed would keep the directory forever.
  if (dir_) remove_dead_rank_sockets(dir_->path());
  dir_.reset();  // last: it goes only once no socket is left in it
}

Result<std::unique_ptr<UnixFdChannel>> UnixFdChannel::open(FdChannelOptions options) {
  const std::string what = "rank " + std::to_string(options.rank) + " opening its fd channel";
  return without_asio_exceptions(what, [&] { return open_unguarded(std::move(options)); });
}

Result<std::unique_ptr<UnixFdChannel>> UnixFdChannel::open_unguarded(FdChannelOptions options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument("fd channel: rank " + std::to_string(options.rank) + " outside world size " +
                            std::to_string(options.world_size));
  }
  ENGRAM_RETURN_IF_ERROR(check_job_id(options.job_id, "job id"));
  if (options.job_token.empty() || options.job_token.size() > kMaxTokenBytes) {
    return invalid_argument("fd channel: the job token must be 1.." + std::to_string(kMaxTokenBytes) + " bytes");
  }
  std::unique_ptr<UnixFdChannel> channel(new UnixFdChannel(std::move(options)));
  const int rank = channel->options_.rank;
  auto ctx = [&](Status s) { return std::move(s).with_context(rank, -1, "listen"); };
  // A rank of this job that fails at once may remove the directory between
  // our mkdir and our bind: then the directory is made again.
  for (int attempt = 0;; ++attempt) {
    const FdChannelOptions& opts = channel->options_;
    auto dir = opts.socket_dir.empty() ? SocketDir::open_default(opts.job_id)
                                       : SocketDir::open(opts.socket_dir, 1, /*remove_when_empty=*/!opts.keep_socket_dir);
    if (!dir.is_ok()) return ctx(std::move(dir).take_status());
    channel->dir_ = std::move(dir).value();
    channel->socket_path_ = fd_socket_path(channel->dir_->path(), rank);
    Status listening = channel->listen();
    if (listening.is_ok()) return channel;
    if (listening.code() != ErrorCode::kNotFound || attempt == 2) return ctx(std::move(listening));
    channel->dir_.reset();
  }
}

Status UnixFdChannel::listen() {
  const FdChannelOptions& opts = options_;
  const std::string& path = socket_path_;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return invalid_argument("fd socket path " + path + " is " + std::to_string(path.size()) +
                            " bytes; Unix sockets allow " + std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                            ": use a shorter socket dir or job id");
  }
  // A socket file left by a crashed run of this job id: reuse the name only
  // when nobody listens on it.
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return permission_denied(path + " exists and is not a socket; remove it (nothing of engramlab's makes it)");
    }
    local::socket probe(impl_->io);
    boost::system::error_code ec;
    probe.connect(local::endpoint(path), ec);
    if (!ec) {
      return Status(ErrorCode::kAlreadyExists,
                    "a live process already listens on " + path + " as rank " + std::to_string(opts.rank) +
                        " of job '" + opts.job_id + "': two jobs with one job id? pick another --job-id");
    }
    ::unlink(path.c_str());
  }
  boost::system::error_code ec;
  auto& acceptor = impl_->acceptor;
  acceptor.open(local(), ec);
  if (!ec) acceptor.bind(local::endpoint(path), ec);
  if (!ec) acceptor.listen(SOMAXCONN, ec);
  if (!ec) acceptor.non_blocking(true, ec);
  if (ec) {
    const bool vanished = ec.value() == ENOENT;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    ::unlink(path.c_str());
    return Status(vanished ? ErrorCode::kNotFound : ErrorCode::kUnavailable,
                  "cannot listen on " + path + ": " + ec.message());
  }
  ::chmod(path.c_str(), 0600);
  socket_teardown_ = TeardownPath(path, TeardownKind::kFile);
  return Status::ok();
}

Status UnixFdChannel::send_fd(int peer_rank, int fd, std::span<const std::byte> header) {
  const int rank = options_.rank;
  auto fail = [&](ErrorCode code, std::string message) {
    return Status(code, std::move(message), {.rank = rank, .peer = peer_rank, .step = "send"});
  };
  if (peer_rank < 0 || peer_rank >= options_.world_size) {
    return fail(ErrorCode::kInvalidArgument, "peer rank " + std::to_string(peer_rank) + " outside world size " +
                                                 std::to_string(options_.world_size));
  }
  if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
    return fail(ErrorCode::kInvalidArgument, "fd " + std::to_string(fd) + " is not an open file descriptor");
  }
  if (header.size() > kMaxHeaderBytes) {
    return fail(ErrorCode::kInvalidArgument, "fd header of " + std::to_string(header.size()) + " bytes exceeds " +
                                                 std::to_string(kMaxHeaderBytes));
  }
  const auto deadline = Clock::now() + options_.deadline;
  const auto socket_deadline = Clock::now() + std::min(options_.peer_socket_wait, options_.deadline);
  // The directory we listen in is the one the job's ranks share: never the
  // option, which is empty when the default directory was opened.
  ENGRAM_CHECK(dir_ != nullptr);
  const std::string path = fd_socket_path(dir_->path(), peer_rank);
  if (Status inside = check_peer_socket_path(dir_->path(), path); !inside.is_ok()) {
    return fail(inside.code(), inside.message());
  }

  local::socket socket(impl_->io);
  for (;;) {
    boost::system::error_code ec;
    socket.connect(local::endpoint(path), ec);
    if (!ec) break;
    socket.close();
    const bool retry = ec == boost::asio::error::connection_refused || ec == boost::asio::error::not_found ||
                       ec.value() == ENOENT;
    if (!retry || Clock::now() >= socket_deadline) {
      const auto waited_ms = std::min(options_.peer_socket_wait, options_.deadline).count();
      if (ec.value() == ENOENT) {
        return fail(ErrorCode::kUnavailable,
                    "cannot send an fd to rank " + std::to_string(peer_rank) + ": no socket " + path +
                        " (searched " + dir_->path() + " for " + std::to_string(waited_ms) + " ms). " +
                        missing_socket_cause(peer_rank));
      }
      if (ec == boost::asio::error::no_descriptors || ec.value() == ENFILE) {
        const Status exhausted = fd_exhausted(
            "rank " + std::to_string(rank) + " connecting to rank " + std::to_string(peer_rank) + " to send an fd",
            ec.message());
        return fail(exhausted.code(), exhausted.message());
      }
      return fail(ErrorCode::kUnavailable, "cannot connect to rank " + std::to_string(peer_rank) + " at " + path +
                                               ": " + ec.message() + " (is the rank still running?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int sock = socket.native_handle();
  // The listener's credentials: only our own user may receive our memory.
  uid_t uid = 0;
  pid_t pid = 0;
  if (!peer_uid(sock, uid, pid) || uid != ::geteuid()) {
    return fail(ErrorCode::kPermissionDenied, "the process listening on " + path + " runs as uid " +
                                                  std::to_string(uid) + ", not ours (" + std::to_string(::geteuid()) +
                                                  "): refusing to send it an fd");
  }
  Hello hello{kHelloMagic, kProtocolVersion, rank, peer_rank, static_cast<uint32_t>(options_.job_token.size()),
              static_cast<uint32_t>(header.size())};
  ByteWriter first;
  first.put(hello);
  for (char c : options_.job_token) first.put(c);
  // A marker byte, so the fd always has data to ride on even with an empty header.
  ByteWriter second;
  second.put<uint8_t>(0xFD);
  second.bytes().insert(second.bytes().end(), header.begin(), header.end());
  std::string why;
  if (!send_all(sock, first.bytes().data(), first.bytes().size(), -1, deadline, why) ||
      !send_all(sock, second.bytes().data(), second.bytes().size(), fd, deadline, why)) {
    return fail(ErrorCode::kUnavailable, "sending the fd to rank " + std::to_string(peer_rank) + " over " + path +
                                             " failed: " + why + " (the receiver died, or refused our token)");
  }
  return Status::ok();
}

void UnixFdChannel::set_peer_hosts(std::vector<HostIdentity> hosts) {
  ENGRAM_CHECK(hosts.size() == static_cast<size_t>(options_.world_size));
  peer_hosts_ = std::move(hosts);
}

std::string UnixFdChannel::missing_socket_cause(int peer_rank) const {
  const std::string peer = "Rank " + std::to_string(peer_rank);
  const std::string same_dir =
      " never opened its fd channel in this directory: it exited, or it resolved another socket directory "
      "(ENGRAMLAB_SOCKET_DIR or XDG_RUNTIME_DIR differ between the ranks' environments; give every rank the same)";
  if (peer_hosts_.empty()) {
    return peer + " is on another host (POSIX fds cannot cross hosts; ranks on different hosts need FABRIC "
                  "handles), or it" + same_dir;
  }
  const HostIdentity& mine = peer_hosts_[static_cast<size_t>(options_.rank)];
  const HostIdentity& theirs = peer_hosts_[static_cast<size_t>(peer_rank)];
  if (theirs == mine) return peer + " reports this host (" + mine.to_string() + ") too, so it" + same_dir;
  return peer + " is on host " + theirs.to_string() + ", this rank on " + mine.to_string() +
         ": POSIX fds cannot cross hosts; ranks on different hosts need FABRIC handles";
}

Result<std::optional<std::pair<int, ReceivedFd>>> UnixFdChannel::take_connection(int sock,
                                                                                Clock::time_point deadline) {
  const int rank = options_.rank;
  std::optional<std::pair<int, ReceivedFd>> none;
  auto refuse = [&](const std::string& who, const std::string& why) {
    ++refused_connections_;
    std::fprintf(stderr, "engramlab: rank %d refused a connection on %s from %s: %s; still serving this job's ranks\n",
                 rank, socket_path_.c_str(), who.c_str(), why.c_str());
  };
  uid_t uid = 0;
  pid_t pid = 0;
  if (!peer_uid(sock, uid, pid)) {
    refuse("an unknown process", "SO_PEERCRED failed");
    return none;
  }
  const std::string who = "pid " + std::to_string(pid) + " uid " + std::to_string(uid);
  // Credentials first: a process of another user gets nothing read or sent.
  if (uid != ::geteuid()) {
    refuse(who, "not this job's user (uid " + std::to_string(::geteuid()) + ")");
    return none;
  }
  const auto handshake_deadline = std::min(deadline, Clock::now() + options_.handshake_timeout);
  std::vector<int> fds;
  std::string why;
  Hello hello{};
  if (!recv_exact(sock, &hello, sizeof(hello), handshake_deadline, fds, why)) {
    close_all(fds);
    refuse(who, "no hello (" + why + ")");
    return none;
  }
  if (!fds.empty() || hello.magic != kHelloMagic || hello.version != kProtocolVersion ||
      hello.token_bytes > kMaxTokenBytes || hello.header_bytes > kMaxHeaderBytes) {
    close_all(fds);
    refuse(who, "not an engramlab fd-channel hello");
    return none;
  }
  std::string token(hello.token_bytes, '\0');
  if (!recv_exact(sock, token.data(), token.size(), handshake_deadline, fds, why) || !fds.empty() ||
      !tokens_equal(token, options_.job_token)) {
    close_all(fds);
    refuse(who, why.empty() ? "wrong job token" : "no token (" + why + ")");
    return none;
  }
  if (hello.src_rank < 0 || hello.src_rank >= options_.world_size || hello.dst_rank != rank) {
    refuse(who, "claims to be rank " + std::to_string(hello.src_rank) + " sending to rank " +
                    std::to_string(hello.dst_rank));
    return none;
  }
  // Authenticated: now the fd and its header.
  std::vector<std::byte> body(1 + hello.header_bytes);
  if (!recv_exact(sock, body.data(), body.size(), deadline, fds, why) || fds.size() != 1 ||
      body[0] != std::byte{0xFD}) {
    const size_t count = fds.size();
    close_all(fds);
    return Status(ErrorCode::kUnavailable,
                  "rank " + std::to_string(hello.src_rank) + " authenticated but its fd message was broken (" +
                      (why.empty() ? std::to_string(count) + " fds instead of 1" : why) + ")",
                  {.rank = rank, .peer = hello.src_rank, .step = "recv"});
  }
  ReceivedFd received;
  received.fd = fds[0];
  received.header.assign(body.begin() + 1, body.end());
  return std::optional<std::pair<int, ReceivedFd>>(std::in_place, hello.src_rank, std::move(received));
}

Result<ReceivedFd> UnixFdChannel::recv_fd(int peer_rank) {
  const int rank = options_.rank;
  if (peer_rank < 0 || peer_rank >= options_.world_size) {
    return Status(ErrorCode::kInvalidArgument,
                  "peer rank " + std::to_string(peer_rank) + " outside world size " + std::to_string(options_.world_size),
                  {.rank = rank, .peer = peer_rank, .step = "recv"});
  }
  if (auto it = queued_.find(peer_rank); it != queued_.end() && !it->second.empty()) {
    ReceivedFd received = std::move(it->second.front());
    it->second.pop_front();
    return received;
  }
  const auto deadline = Clock::now() + options_.deadline;
  auto& acceptor = impl_->acceptor;
  for (;;) {
    if (!wait_ready(acceptor.native_handle(), POLLIN, deadline)) break;
    local::socket connection(impl_->io);
    boost::system::error_code ec;
    acceptor.accept(connection, ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) continue;
    if (ec == boost::asio::error::no_descriptors || ec.value() == ENFILE) {
      const Status exhausted = fd_exhausted(
          "rank " + std::to_string(rank) + " accepting an fd from rank " + std::to_string(peer_rank),
          ec.message());
      return Status(exhausted.code(), exhausted.message(),
                    {.rank = rank, .peer = peer_rank, .step = "recv"});
    }
    if (ec) {
      return Status(ErrorCode::kUnavailable, "accept on " + socket_path_ + " failed: " + ec.message(),
                    {.rank = rank, .peer = peer_rank, .step = "recv"});
    }
    ENGRAM_ASSIGN_OR_RETURN(auto taken, take_connection(connection.native_handle(), deadline));
    if (!taken) continue;  // refused and logged; keep serving
    if (taken->first == peer_rank) return std::move(taken->second);
    queued_[taken->first].push_back(std::move(taken->second));
  }
  return Status(ErrorCode::kUnavailable,
                "waited " + std::to_string(options_.deadline.count()) + " ms on " + socket_path_ +
                    " for an fd from rank " + std::to_string(peer_rank) + "; none came: rank " +
                    std::to_string(peer_rank) + " died, is not sending, or is on another host (POSIX fds cannot "
                    "cross hosts)",
                {.rank = rank, .peer = peer_rank, .step = "recv"});
}

}  // namespace engram::ipc
