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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/ipc/tcp_collectives.h"

namespace engram::testing {

// A port nobody listens on now (the kernel's pick for an ephemeral bind).
inline uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Forks `world` ranks; each joins the job at `port` with `op_timeout` and
// exits with body(rank, world collectives) (a failed join: 50). Returns
// every rank's exit status, in rank order, once all have ended.
inline std::vector<int> run_forked_tcp_ranks(int world, std::chrono::milliseconds op_timeout,
                                             const std::function<int(int rank, Collectives& world)>& body) {
  const uint16_t port = free_loopback_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ipc::TcpCollectivesOptions o{.rank = r, .world_size = world, .master_addr = "127.0.0.1", .master_port = port,
                                   .job_token = "0123456789abcdef0123456789abcdef", .job_id = "forked-ranks"};
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
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
  }
  return codes;
}

}  // namespace engram::testing
