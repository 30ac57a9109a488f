// TcpCollectives between forked processes on loopback, and the launcher
// environment rules.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>
#include <string>

#include "backends/ipc/launch_env.h"
#include "backends/ipc/tcp_collectives.h"
#include "core/base/bf16.h"

namespace engram::ipc {
namespace {

using namespace std::chrono_literals;
const std::string kToken = "fedcba9876543210fedcba9876543210";

uint16_t free_port() {
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

TcpCollectivesOptions opts(int rank, int world, uint16_t port, std::string token = kToken) {
  TcpCollectivesOptions o{.rank = rank, .world_size = world, .master_addr = "127.0.0.1", .master_port = port,
                          .job_token = std::move(token), .job_id = "colltest"};
  o.join_timeout = 5000ms;
  o.op_timeout = 3000ms;
  return o;
}

int wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// A rank process: joins and runs all the collectives, checking results; the
// exit status counts failures.
int rank_main(int rank, int world, uint16_t port, int expect_refused = 0) {
  auto group = TcpCollectives::join(opts(rank, world, port));
  if (!group.is_ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, group.status().to_string().c_str());
    return 50;
  }
  int bad = 0;
  if (rank == 0 && (*group)->refused_connections() != expect_refused) {
    std::fprintf(stderr, "rank 0 refused %d connections, expected %d\n", (*group)->refused_connections(), expect_refused);
    bad += 1;
  }
  const int32_t me = rank * 10;
  std::vector<int32_t> all(static_cast<size_t>(world));
  bad += !(*group)->all_gather(std::as_bytes(std::span(&me, 1)), std::as_writable_bytes(std::span(all))).is_ok();
  for (int r = 0; r < world; ++r) bad += all[static_cast<size_t>(r)] != r * 10;

  const size_t chunk = 5;
  std::vector<std::vector<uint16_t>> inputs(static_cast<size_t>(world), std::vector<uint16_t>(chunk * world));
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < chunk * world; ++i)
      inputs[static_cast<size_t>(r)][i] = float_to_bf16(1.0f / static_cast<float>(r + 3) + 0.77f * static_cast<float>(i));
  std::vector<uint16_t> out(chunk), ref(chunk);
  bad += !(*group)->reduce_scatter_sum_bf16(inputs[static_cast<size_t>(rank)], out).is_ok();
  std::vector<std::span<const uint16_t>> views(inputs.begin(), inputs.end());
  reduce_scatter_sum_bf16_reference(views, rank, ref);
  bad += out != ref;  // bitwise the emulator's arithmetic

  std::vector<int32_t> send(static_cast<size_t>(world)), recv(static_cast<size_t>(world));
  for (int j = 0; j < world; ++j) send[static_cast<size_t>(j)] = rank * 100 + j;
  bad += !(*group)->all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(recv))).is_ok();
  for (int r = 0; r < world; ++r) bad += recv[static_cast<size_t>(r)] != r * 100 + rank;

  // Mismatched lengths are an error for everyone, and the group survives it.
  std::vector<std::byte> uneven(static_cast<size_t>(rank + 1)), sink(static_cast<size_t>(world * (rank + 1)));
  const Status mismatch = (*group)->all_gather(uneven, sink);
  bad += mismatch.code() != ErrorCode::kInvalidArgument;
  bad += !(*group)->barrier().is_ok();

  auto sub = (*group)->split(rank % 2, -rank);
  if (!sub.is_ok()) return 60;
  const int expected_size = (world + 1 - rank % 2) / 2;
  bad += (*sub)->size() != expected_size;
  std::vector<int32_t> members(static_cast<size_t>((*sub)->size()));
  bad += !(*sub)->all_gather(std::as_bytes(std::span(&rank, 1)), std::as_writable_bytes(std::span(members))).is_ok();
  for (size_t i = 0; i + 1 < members.size(); ++i) bad += members[i] < members[i + 1];  // key = -rank
  bad += !(*group)->barrier().is_ok();
  return bad;
}

TEST(HostCollectives, FourProcessesRunEveryCollective) {
  const uint16_t port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(rank_main(r, 4, port));
    pids.push_back(pid);
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(wait_child(pids[static_cast<size_t>(r)]), 0) << "rank " << r;
}

TEST(HostCollectives, RendezvousRefusesAWrongTokenAndTheJobContinues) {
  const uint16_t port = free_port();
  const pid_t imposter = ::fork();
  if (imposter == 0) {
    auto group = TcpCollectives::join(opts(1, 3, port, "wrong-token-wrong-token-wrong-tok"));
    if (group.is_ok()) ::_exit(1);
    std::fprintf(stderr, "imposter: %s\n", group.status().to_string().c_str());
    ::_exit(group.status().code() == ErrorCode::kPermissionDenied ? 0 : 2);
  }
  std::vector<pid_t> pids;
  for (int r = 1; r < 3; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::this_thread::sleep_for(200ms);  // let the imposter arrive first
      ::_exit(rank_main(r, 3, port));
    }
    pids.push_back(pid);
  }
  const pid_t leader = ::fork();
  if (leader == 0) ::_exit(rank_main(0, 3, port, /*expect_refused=*/1));
  EXPECT_EQ(wait_child(imposter), 0) << "the imposter must be refused with permission_denied";
  EXPECT_EQ(wait_child(leader), 0) << "rank 0 must refuse exactly one connection and finish the job";
  for (pid_t pid : pids) EXPECT_EQ(wait_child(pid), 0) << "the real ranks must finish every collective";
}

TEST(HostCollectives, ADeadRankStopsEveryWaitingRankNamingIt) {
  const uint16_t port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto group = TcpCollectives::join(opts(r, 4, port));
      if (!group.is_ok()) ::_exit(50);
      if (r == 2) ::raise(SIGKILL);  // dies holding its connection, mid-job
      const auto start = std::chrono::steady_clock::now();
      const Status s = (*group)->barrier();
      const auto took = std::chrono::steady_clock::now() - start;
      std::fprintf(stderr, "rank %d: %s\n", r, s.to_string().c_str());
      const bool named = s.code() == ErrorCode::kUnavailable && s.context().peer == 2 &&
                         s.message().find("rank 2") != std::string::npos && s.context().step == "barrier";
      // Later calls fail at once with the same error: the group is broken.
      const Status again = (*group)->barrier();
      ::_exit(named && took < 2s && again.code() == ErrorCode::kUnavailable ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (int r = 0; r < 4; ++r) {
    const int status = wait_child(pids[static_cast<size_t>(r)]);
    if (r == 2) EXPECT_EQ(status, 100 + SIGKILL);
    else EXPECT_EQ(status, 0) << "rank " << r << " must fail fast naming rank 2";
  }
}

TEST(HostCollectives, AMissingRankEndsTheRendezvousAtItsDeadline) {
  const uint16_t port = free_port();
  auto o = opts(0, 2, port);
  o.join_timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  auto group = TcpCollectives::join(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  ASSERT_EQ(group.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(group.status().message().find("ranks 1 never joined"), std::string::npos) << group.status().message();
}

// --- launcher environment ---

}  // namespace
}  // namespace engram::ipc
