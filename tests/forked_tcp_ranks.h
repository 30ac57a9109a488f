// Ranks as forked processes joined over TcpCollectives on loopback, for
// tests of code that runs over the real host collectives: each child runs a
// body and exits with its status (0 ok; 100 + signal when killed).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/ipc/tcp_collectives.h"

namespace engram::testing {

// A loopback TCP socket, bound to a port the kernel picked and listening,
// for rank 0 to take over (TcpCollectivesOptions::listen_fd): the port is
// never free between its choice and the rendezvous, so nothing else can take
// it. Every process that does not hand it to rank 0 closes its copy (the
// forking test once the ranks started, the other ranks as they start), so a
// dead rank 0 leaves nobody listening.
class LoopbackListener {
 public:
  LoopbackListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd_, SOMAXCONN) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::perror("LoopbackListener");
      std::abort();
    }
    port_ = ntohs(addr.sin_port);
  }
  ~LoopbackListener() { close(); }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;

  uint16_t port() const { return port_; }
  // For rank 0's options; the group closes it from then on.
  int hand_over() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// Rank `rank`'s options for a job on `listener`: rank 0 takes the listening
// socket over, every other rank closes its copy and connects to the port.
inline ipc::TcpCollectivesOptions forked_rank_options(LoopbackListener& listener, int rank, int world,
                                                      const std::string& job_token, const std::string& job_id) {
  ipc::TcpCollectivesOptions o{.rank = rank, .world_size = world, .master_addr = "127.0.0.1",
                               .master_port = listener.port(), .job_token = job_token, .job_id = job_id};
  if (rank == 0) o.listen_fd = listener.hand_over();
  listener.close();
  return o;
}

// Forks `world` ranks; each joins the job at `port` with `op_timeout` and
// exits with body(rank, world collectives) (a failed join: 50). Returns
// every rank's exit status, in rank order, once all have ended.
inline std::vector<int> run_forked_tcp_ranks(int world, std::chrono::milliseconds op_timeout,
                                             const std::function<int(int rank, Collectives& world)>& body) {
  LoopbackListener listener;
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ipc::TcpCollectivesOptions o =
          forked_rank_options(listener, r, world, "0123456789abcdef0123456789abcdef", "forked-ranks");
      o.join_timeout = std::chrono::milliseconds(10000);
      o.op_timeout = op_timeout;
      auto group = ipc::TcpCollectives::join(o);
      if (!group.is_ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, group.status().to_string().c_str());
        ::_exit(50);
      }
      const int code = body(r, **group);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  listener.close();
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
  }
  return codes;
}

}  // namespace engram::testing
