// FdChannel over Unix domain sockets with SCM_RIGHTS. Each rank listens on
// <socket_dir>/rank-<r>.sock in a directory only this user can reach (0700,
// every component of its path checked: socket_dir.h), removed when the last
// rank leaves.
// A sender connects, presents the job token and its rank, then sends the fd
// with a small header; the receiver checks SO_PEERCRED and the token before
// taking anything, refuses strangers (logged to stderr) and carries on.
// Sends do not wait for the receiver (the kernel queues the connection), so
// "everyone sends, then everyone receives" cannot deadlock.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/ipc/signal_teardown.h"
#include "backends/ipc/socket_dir.h"
#include "core/backend/fd_channel.h"
#include "core/backend/host_probe.h"

namespace engram::ipc {

struct FdChannelOptions {
  int rank = -1;
  int world_size = 0;
  std::string job_id;
  std::string job_token;
  // Empty: default_socket_dir(job_id). Namespace tests point it at a private tmpfs.
  std::string socket_dir;
  // The directory was there before the job (a user's): ranks remove their
  // sockets but never it (ENGRAMLAB_SOCKET_DIR_KEEP=1, set by `launch`).
  bool keep_socket_dir = false;
  // Bound on every blocking call: a recv_fd returns by it however many
  // connections are queued.
  std::chrono::milliseconds deadline{10000};
  // How long a send waits for the peer's socket to appear (startup races);
  // a rank on another host never gets one. Capped by `deadline`.
  std::chrono::milliseconds peer_socket_wait{1000};
  // How long an accepted connection may take to present its token.
  std::chrono::milliseconds handshake_timeout{1000};
};

std::string fd_socket_path(const std::string& socket_dir, int rank);

// A send may connect only to a rank socket inside the job's own directory:
// `socket_path` must be `<job_dir>/rank-<r>.sock` for an absolute, non-empty
// `job_dir` without `.` or `..` components, and, when something exists at
// that name, a socket (not a symlink or a file). Otherwise
// permission_denied naming both paths: nothing is connected to.
Status check_peer_socket_path(const std::string& job_dir, const std::string& socket_path);

class UnixFdChannel final : public FdChannel {
 public:
  // Creates the directory (0700, owned by us, checked) and listens. Call
  // before the job's first barrier so peers find the socket.
  static Result<std::unique_ptr<UnixFdChannel>> open(FdChannelOptions options);
  // Stops listening, unlinks the socket, closes queued fds, and removes the
  // directory when no other rank's socket is left in it.
  ~UnixFdChannel() override;

  Status send_fd(int peer_rank, int fd, std::span<const std::byte> header) override;
  Result<ReceivedFd> recv_fd(int peer_rank) override;

  const std::string& socket_path() const { return socket_path_; }
  // The directory this channel listens in, and sends into: the one source of truth.
  const std::string& socket_dir() const { return dir_->path(); }
  // Every rank's host, by world rank, once the job has met (RealRankBackend
  // gathers them after the rendezvous), so an error for a missing peer socket
  // says whether the peer is on this host instead of guessing.
  void set_peer_hosts(std::vector<HostIdentity> hosts);
  int refused_connections() const { return refused_connections_; }

 private:
  // open's body; open turns what Boost.Asio throws (EMFILE) into a Status.
  static Result<std::unique_ptr<UnixFdChannel>> open_unguarded(FdChannelOptions options);
  explicit UnixFdChannel(FdChannelOptions options);
  struct Impl;
  // Binds and listens on socket_path_ in dir_.
  Status listen();
  // Reads one sender's hello and fd from an accepted connection, all by
  // `deadline`; a refusal is logged and reported as nullopt-with-ok.
  Result<std::optional<std::pair<int, ReceivedFd>>> take_connection(int connection_fd,
                                                                    std::chrono::steady_clock::time_point deadline);

  // Why `peer_rank`'s socket in our directory is missing, from what the job knows of hosts.
  std::string missing_socket_cause(int peer_rank) const;

  FdChannelOptions options_;
  std::unique_ptr<SocketDir> dir_;
  std::vector<HostIdentity> peer_hosts_;  // by world rank; empty until set_peer_hosts
  std::string socket_path_;
  TeardownPath socket_teardown_;  // socket_path_, while we listen on it
  std::unique_ptr<Impl> impl_;
  std::map<int, std::deque<ReceivedFd>> queued_;  // fds that arrived from other peers first
  int refused_connections_ = 0;
};

}  // namespace engram::ipc
