// TcpCollectives between forked processes on loopback -- including
// strangers of another uid on the rendezvous port -- and the launcher
// environment rules.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>
#include <string>

#include "backends/ipc/launch_env.h"
#include "backends/ipc/tcp_collectives.h"
#include "backends/ipc/tcp_frames.h"
#include "backends/ipc/tcp_rendezvous.h"
#include "backends/ipc/wire.h"
#include "core/base/bf16.h"
#include "tests/forked_tcp_ranks.h"

namespace engram::ipc {
namespace {

using namespace std::chrono_literals;
const std::string kToken = "fedcba9876543210fedcba9876543210";

using testing::LoopbackListener;

// Rank 0 takes the test's listening socket over; any other rank closes its
// copy (tests/forked_tcp_ranks.h). The timeouts only end a failing wait: a
// test that times how fast something fails holds it to a fraction of them.
TcpCollectivesOptions opts(int rank, int world, LoopbackListener& listener, const std::string& token = kToken) {
  TcpCollectivesOptions o = testing::forked_rank_options(listener, rank, world, token, "colltest");
  o.join_timeout = 30000ms;
  o.op_timeout = 30000ms;
  return o;
}

int wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// A rank process: joins and runs all the collectives, checking results; the
// exit status counts failures.
int rank_main(int rank, int world, LoopbackListener& listener, int expect_refused = 0) {
  auto group = TcpCollectives::join(opts(rank, world, listener));
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
  LoopbackListener listener;
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(rank_main(r, 4, listener));
    pids.push_back(pid);
  }
  listener.close();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(wait_child(pids[static_cast<size_t>(r)]), 0) << "rank " << r;
}

TEST(HostCollectives, RendezvousRefusesAWrongTokenAndTheJobContinues) {
  LoopbackListener listener;
  const pid_t imposter = ::fork();
  if (imposter == 0) {
    auto group = TcpCollectives::join(opts(1, 3, listener, "wrong-token-wrong-token-wrong-tok"));
    if (group.is_ok()) ::_exit(1);
    std::fprintf(stderr, "imposter: %s\n", group.status().to_string().c_str());
    ::_exit(group.status().code() == ErrorCode::kPermissionDenied ? 0 : 2);
  }
  const pid_t leader = ::fork();
  if (leader == 0) ::_exit(rank_main(0, 3, listener, /*expect_refused=*/1));
  listener.close();
  // The real ranks start once the leader has turned the imposter away (it
  // exits on the refusal), so the imposter is refused before the job forms.
  EXPECT_EQ(wait_child(imposter), 0) << "the imposter must be refused with permission_denied";
  std::vector<pid_t> pids;
  for (int r = 1; r < 3; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(rank_main(r, 3, listener));
    pids.push_back(pid);
  }
  EXPECT_EQ(wait_child(leader), 0) << "rank 0 must refuse exactly one connection and finish the job";
  for (pid_t pid : pids) EXPECT_EQ(wait_child(pid), 0) << "the real ranks must finish every collective";
}

TEST(HostCollectives, ADeadRankStopsEveryWaitingRankNamingIt) {
  LoopbackListener listener;
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto group = TcpCollectives::join(opts(r, 4, listener));
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
      // At once, not at the 30 s collective timeout.
      ::_exit(named && took < 5s && again.code() == ErrorCode::kUnavailable ? 0 : 1);
    }
    pids.push_back(pid);
  }
  listener.close();
  for (int r = 0; r < 4; ++r) {
    const int status = wait_child(pids[static_cast<size_t>(r)]);
    if (r == 2) EXPECT_EQ(status, 100 + SIGKILL);
    else EXPECT_EQ(status, 0) << "rank " << r << " must fail fast naming rank 2";
  }
}

TEST(HostCollectives, AMissingRankEndsTheRendezvousAtItsDeadline) {
  LoopbackListener listener;
  auto o = opts(0, 2, listener);
  o.join_timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  auto group = TcpCollectives::join(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_EQ(group.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(group.status().message().find("ranks 1 never joined"), std::string::npos) << group.status().message();
}

// --- strangers on the rendezvous port ---

// Acts as another user from here on: uid/gid nobody when the test runs as
// root (CI does), else the same user (the protocol must hold either way).
bool become_stranger() {
  if (::geteuid() != 0) return true;
  return ::setresgid(65534, 65534, 65534) == 0 && ::setresuid(65534, 65534, 65534) == 0;
}

int tcp_socket_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads what arrives on `fd` until EOF or `ms` pass.
std::string read_until_eof(int fd, int ms) {
  std::string got;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

bool read_exact(int fd, void* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 3000) <= 0) return false;
    const ssize_t r = ::recv(fd, static_cast<char*>(out) + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

void send_frame(int fd, uint32_t kind, const std::vector<std::byte>& payload) {
  FrameHeader h;
  h.kind = kind;
  h.payload_bytes = payload.size();
  ::send(fd, &h, sizeof(h), MSG_NOSIGNAL);
  if (!payload.empty()) ::send(fd, payload.data(), payload.size(), MSG_NOSIGNAL);
}

void write_all(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::write(fd, text.data() + sent, text.size() - sent);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string read_pipe(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Rank 0 is late; another user's process holds MASTER_PORT and answers the
// member with a forged proof. The member must refuse it before saying
// anything about the job, and the stranger must end up with nothing but a
// random nonce.
TEST(HostCollectives, AStrangerHoldingThePortLearnsNothingAndIsRefused) {
  LoopbackListener listener;
  int ready[2], captured[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(captured), 0);
  const pid_t stranger = ::fork();
  if (stranger == 0) {
    ::close(ready[0]);
    ::close(captured[0]);
    // The stranger holds MASTER_PORT: the listening socket rank 0 would get.
    const int held = listener.hand_over();
    if (!become_stranger()) ::_exit(20);
    if (::write(ready[1], "r", 1) != 1) ::_exit(22);
    const int c = ::accept(held, nullptr, nullptr);
    if (c < 0) ::_exit(23);
    FrameHeader first;
    if (!read_exact(c, &first, sizeof(first))) ::_exit(24);
    std::string got(reinterpret_cast<const char*>(&first), sizeof(first));
    std::vector<char> body(std::min<uint64_t>(first.payload_bytes, 4096));
    if (!read_exact(c, body.data(), body.size())) ::_exit(25);
    got.append(body.data(), body.size());
    send_frame(c, kLeaderProof, std::vector<std::byte>(64, std::byte{0x5a}));  // a nonce and a forged MAC
    got += read_until_eof(c, 3000);
    write_all(captured[1], got);
    ::_exit(0);
  }
  listener.close();
  ::close(ready[1]);
  ::close(captured[1]);
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the stranger never listened";
  auto o = opts(1, 2, listener);
  const auto start = std::chrono::steady_clock::now();
  auto group = TcpCollectives::join(o);
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string got = read_pipe(captured[0]);
  EXPECT_EQ(wait_child(stranger), 0);
  ::close(ready[0]);
  ::close(captured[0]);

  ASSERT_EQ(group.status().code(), ErrorCode::kPermissionDenied) << group.status().to_string();
  EXPECT_NE(group.status().message().find("failed authentication"), std::string::npos) << group.status().message();
  EXPECT_NE(group.status().message().find("Nothing job-specific was sent"), std::string::npos);
  EXPECT_EQ(group.status().context().step, "rendezvous");
  EXPECT_LT(took, 5s) << "a forged proof is refused at once, not after the 30 s join timeout";
  // All it heard: one frame of a version and a 32-byte random nonce.
  EXPECT_EQ(got.size(), sizeof(FrameHeader) + 4 + 32);
  EXPECT_EQ(got.find(kToken), std::string::npos);
  EXPECT_EQ(got.find("colltest"), std::string::npos) << "not even the job id";
}

// A stranger that reaches the real leader and reflects the leader's own
// proof back as a member's is refused without a word; the job goes on.
TEST(HostCollectives, AReflectedProofDoesNotJoin) {
  LoopbackListener listener;
  const uint16_t port = listener.port();
  const pid_t leader = ::fork();
  if (leader == 0) ::_exit(rank_main(0, 2, listener, /*expect_refused=*/1));
  listener.close();
  const pid_t stranger = ::fork();
  if (stranger == 0) {
    if (!become_stranger()) ::_exit(20);
    const int fd = tcp_socket_to(port);  // the leader's socket listens from the start
    if (fd < 0) ::_exit(21);
    ByteWriter nonce;
    nonce.put<uint32_t>(1);
    nonce.put(std::array<uint8_t, 32>{});
    send_frame(fd, kMemberNonce, nonce.bytes());
    FrameHeader h;
    std::vector<std::byte> proof(64);
    if (!read_exact(fd, &h, sizeof(h)) || h.kind != kLeaderProof || h.payload_bytes != 64) ::_exit(22);
    if (!read_exact(fd, proof.data(), proof.size())) ::_exit(23);
    ByteWriter claim;
    claim.put_string("world");
    claim.put_string("colltest");
    claim.put_string("127.0.0.1");
    claim.put<int32_t>(1);
    claim.put<int32_t>(1);
    claim.put<int32_t>(2);
    claim.put_bytes(std::span(proof).subspan(32));  // the leader's MAC, reflected
    send_frame(fd, kMemberProof, claim.bytes());
    // Refused in silence: no refusal frame (that is for token holders), just EOF.
    const std::string answer = read_until_eof(fd, 3000);
    ::_exit(answer.empty() ? 0 : 24);
  }
  EXPECT_EQ(wait_child(stranger), 0) << "the reflected proof must be refused with nothing sent back";
  const pid_t member = ::fork();
  if (member == 0) ::_exit(rank_main(1, 2, listener));
  EXPECT_EQ(wait_child(leader), 0) << "rank 0 refuses exactly the stranger and finishes the job";
  EXPECT_EQ(wait_child(member), 0);
}

// 1,100 idle connections from another user, more than rank 0's fd limit
// allows: it holds a bounded number at a time, drops the silent ones, and
// the job meets and runs.
TEST(HostCollectives, AFloodOfIdleConnectionsDoesNotKeepTheJobFromMeeting) {
  constexpr int kFlood = 1100;
  LoopbackListener listener;
  const uint16_t port = listener.port();
  const pid_t leader = ::fork();
  if (leader == 0) {
    const rlimit few{256, 256};  // far below the flood: fds must stay bounded
    if (::setrlimit(RLIMIT_NOFILE, &few) != 0) ::_exit(40);
    auto o = opts(0, 3, listener);
    auto group = TcpCollectives::join(o);
    if (!group.is_ok()) {
      std::fprintf(stderr, "rank 0: %s\n", group.status().to_string().c_str());
      ::_exit(41);
    }
    const int refused = (*group)->refused_connections();
    std::fprintf(stderr, "rank 0 refused %d connections\n", refused);
    ::_exit((*group)->barrier().is_ok() && refused >= kFlood - 100 ? 0 : 42);
  }
  listener.close();
  int ready[2], stop[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(stop), 0);
  const pid_t stranger = ::fork();
  if (stranger == 0) {
    ::close(ready[0]);
    ::close(stop[1]);
    const rlimit many{4096, 4096};
    ::setrlimit(RLIMIT_NOFILE, &many);  // as root, before dropping to nobody
    if (!become_stranger()) ::_exit(20);
    std::vector<int> held;
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (static_cast<int>(held.size()) < kFlood && std::chrono::steady_clock::now() < give_up) {
      const int fd = tcp_socket_to(port);
      if (fd >= 0) held.push_back(fd);
      else std::this_thread::sleep_for(5ms);  // rank 0's backlog is full: it drops the silent ones
    }
    if (static_cast<int>(held.size()) < kFlood) ::_exit(21);
    if (::write(ready[1], "r", 1) != 1) ::_exit(22);
    char byte;
    (void)::read(stop[0], &byte, 1);  // holds them, silent, until the job is over
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(stop[0]);
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the stranger could not open its connections";
  const auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> members;
  for (int r = 1; r < 3; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto o = opts(r, 3, listener);
      auto group = TcpCollectives::join(o);
      if (!group.is_ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, group.status().to_string().c_str());
        ::_exit(50);
      }
      ::_exit((*group)->barrier().is_ok() ? 0 : 51);
    }
    members.push_back(pid);
  }
  EXPECT_EQ(wait_child(leader), 0);
  for (pid_t pid : members) EXPECT_EQ(wait_child(pid), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  ::close(stop[1]);
  ::close(ready[0]);
  EXPECT_EQ(wait_child(stranger), 0);
}

// In the leader's process: the data segments its accepted connection on
// `port` has received (0 before one is accepted). A member's frames go out
// one write each, so this counts its frames: 1 its nonce, 2 its claim (sent
// only once it has verified the leader's proof).
// glibc's tcp_info stops at tcpi_total_retrans; the kernel's goes on
// (include/uapi/linux/tcp.h; <linux/tcp.h> clashes with <netinet/tcp.h>).
struct KernelTcpInfo {
  tcp_info glibc;
  uint64_t pacing_rate, max_pacing_rate, bytes_acked, bytes_received;
  uint32_t segs_out, segs_in, notsent_bytes, min_rtt, data_segs_in, data_segs_out;
};
static_assert(sizeof(tcp_info) == 104, "glibc's tcp_info is the kernel's prefix");

uint32_t accepted_frames_in(uint16_t port) {
  for (int fd = 0; fd < 1024; ++fd) {
    sockaddr_in local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 || local.sin_family != AF_INET ||
        ntohs(local.sin_port) != port)
      continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;  // the listener
    KernelTcpInfo info{};
    socklen_t info_len = sizeof(info);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_len) == 0 &&
        info_len >= offsetof(KernelTcpInfo, data_segs_out))
      return info.data_segs_in;
  }
  return 0;
}

// The leader dies while a member that has authenticated waits for the
// welcome: an unavailable peer, not a token problem.
TEST(HostCollectives, ALeaderKilledDuringTheRendezvousIsReportedUnavailable) {
  LoopbackListener listener;
  const uint16_t port = listener.port();
  int claimed[2];
  ASSERT_EQ(::pipe(claimed), 0);
  const pid_t leader = ::fork();
  if (leader == 0) {
    ::close(claimed[0]);
    // Tells the test once the member has authenticated this leader and
    // presented its claim: the member's second frame on the connection.
    std::thread watcher([&] {
      const auto deadline = std::chrono::steady_clock::now() + 5s;
      while (std::chrono::steady_clock::now() < deadline) {
        if (accepted_frames_in(port) >= 2) {
          write_all(claimed[1], "c");
          return;
        }
        std::this_thread::sleep_for(1ms);
      }
    });
    watcher.detach();
    auto group = TcpCollectives::join(opts(0, 3, listener));  // rank 2 never comes
    ::_exit(group.is_ok() ? 1 : 0);
  }
  listener.close();
  ::close(claimed[1]);
  const pid_t member = ::fork();
  if (member == 0) {
    auto o = opts(1, 3, listener);
    const auto start = std::chrono::steady_clock::now();
    auto group = TcpCollectives::join(o);
    const auto took = std::chrono::steady_clock::now() - start;
    std::fprintf(stderr, "member: %s\n", group.status().to_string().c_str());
    const bool named = group.status().code() == ErrorCode::kUnavailable &&
                       group.status().message().find("died") != std::string::npos &&
                       group.status().context().peer == 0;
    ::_exit(named && took < 5s ? 0 : 1);
  }
  // The member has met rank 0 and waits for rank 2.
  pollfd ready{.fd = claimed[0], .events = POLLIN, .revents = 0};
  EXPECT_EQ(::poll(&ready, 1, 5000), 1) << "the member never presented its claim to the leader";
  ::close(claimed[0]);
  ::kill(leader, SIGKILL);
  EXPECT_EQ(wait_child(leader), 100 + SIGKILL);
  EXPECT_EQ(wait_child(member), 0) << "the member must report rank 0 as gone (unavailable), quickly";
}

// An authenticated member (the real handshake) whose first all_gather frame
// claims `claimed_bytes`, followed by `sent_bytes` of payload, then EOF.
// Rank 0 runs in a child that reports its round's Status and its peak RSS.
struct LeaderReport {
  ErrorCode code = ErrorCode::kOk;
  int peer = -1;
  std::string text;
  long max_rss_kib = 0;
};

LeaderReport leader_against_claim(uint64_t claimed_bytes, size_t sent_bytes) {
  LoopbackListener listener;
  const uint16_t port = listener.port();
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  const pid_t leader = ::fork();
  if (leader == 0) {
    ::close(pipe_fds[0]);
    auto group = TcpCollectives::join(opts(0, 2, listener));
    if (!group.is_ok()) ::_exit(50);
    const int32_t me = 0;
    std::vector<int32_t> all(2);
    const Status round = (*group)->all_gather(std::as_bytes(std::span(&me, 1)), std::as_writable_bytes(std::span(all)));
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    write_all(pipe_fds[1], std::to_string(static_cast<int>(round.code())) + "\n" +
                               std::to_string(round.context().peer) + "\n" + std::to_string(usage.ru_maxrss) + "\n" +
                               round.to_string());
    ::_exit(0);
  }
  listener.close();
  ::close(pipe_fds[1]);
  {
    asio::io_context io;
    RendezvousSettings settings{.tag = "world", .job_id = "colltest", .job_token = kToken,
                                .deadline = Clock::now() + 5s};
    settings.join_timeout = 5000ms;
    std::unique_ptr<tcp::socket> link;
    auto joined = join_leader(io, "127.0.0.1", port, settings, MemberClaim{1, 1, 2}, 0, link);
    EXPECT_TRUE(joined.is_ok()) << joined.status().to_string();
    if (joined.is_ok()) {
      FrameHeader h;
      h.kind = kOpAllGather;
      h.seq = 1;
      h.payload_bytes = claimed_bytes;
      h.origin = 1;
      const int fd = link->native_handle();
      ::send(fd, &h, sizeof(h), MSG_NOSIGNAL);
      const std::vector<char> bytes(sent_bytes, 'x');
      for (size_t at = 0; at < bytes.size();) {
        const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
        if (n <= 0) break;
        at += static_cast<size_t>(n);
      }
      // EOF before the claimed bytes; the leader's end closes once it
      // has failed the round (its process ends).
      ::shutdown(fd, SHUT_WR);
      read_until_eof(fd, 30000);
    }
  }
  const std::string out = read_pipe(pipe_fds[0]);
  ::close(pipe_fds[0]);
  EXPECT_EQ(wait_child(leader), 0) << out;
  LeaderReport report;
  size_t a = out.find('\n'), b = out.find('\n', a + 1), c = out.find('\n', b + 1);
  if (c == std::string::npos) return report;
  report.code = static_cast<ErrorCode>(std::stoi(out.substr(0, a)));
  report.peer = std::stoi(out.substr(a + 1, b - a - 1));
  report.max_rss_kib = std::stol(out.substr(b + 1, c - b - 1));
  report.text = out.substr(c + 1);
  return report;
}

// 2^36 bytes is what an all_gather input may carry: the claim alone must
// not make rank 0 allocate it. The buffer follows the bytes that came.
TEST(HostCollectives, AClaimedHugePayloadAllocatesOnlyWhatArrives) {
  const LeaderReport r = leader_against_claim(uint64_t{1} << 36, size_t{1} << 20);
  EXPECT_EQ(r.code, ErrorCode::kUnavailable) << r.text;
  EXPECT_EQ(r.peer, 1) << r.text;
  EXPECT_NE(r.text.find("rank 1 closed its connection"), std::string::npos) << r.text;
  EXPECT_LT(r.max_rss_kib, 512 * 1024) << "rank 0 held " << r.max_rss_kib << " KiB for a 1 MiB payload";
}

// A claim above the kind's limit is a protocol error naming the peer and the
// limit, at once, without reading on.
TEST(HostCollectives, AnOversizedFrameHeaderIsAProtocolErrorNamingThePeerAndTheLimit) {
  const auto start = std::chrono::steady_clock::now();
  const LeaderReport r = leader_against_claim((uint64_t{1} << 36) + 1, 0);
  EXPECT_EQ(r.code, ErrorCode::kInternal) << r.text;
  EXPECT_EQ(r.peer, 1) << r.text;
  EXPECT_NE(r.text.find("protocol error: rank 1 sent a frame of kind all_gather claiming 68719476737 bytes, more than the "
                        "68719476736 bytes it may carry"),
            std::string::npos)
      << r.text;
  EXPECT_LT(r.max_rss_kib, 512 * 1024);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "refused on the header, not at the 30 s op_timeout";
}

// --- launcher environment ---

}  // namespace
}  // namespace engram::ipc
