// UnixFdChannel between real processes: a memfd crosses and stays usable; a
// connection without the token, or from another uid, gets nothing while the
// rank keeps serving; a peer whose socket does not exist fails fast naming
// the directory searched and, from the job's hosts, why; the default
// directory is the one sends go to; a peer path outside the job's directory
// is refused before connecting.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "backends/ipc/unix_fd_channel.h"

namespace engram::ipc {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kToken = "0123456789abcdef0123456789abcdef";

struct Scratch {
  Scratch() {
    char templ[] = "/tmp/engramlab-fdtest-XXXXXX";
    base = ::mkdtemp(templ);
    dir = base + "/sockets";
  }
  ~Scratch() { fs::remove_all(base); }
  std::string base, dir;
};

FdChannelOptions options_for(int rank, const std::string& dir, int world = 3) {
  FdChannelOptions o{.rank = rank, .world_size = world, .job_id = "fdtest", .job_token = kToken, .socket_dir = dir};
  o.deadline = 5000ms;
  o.peer_socket_wait = 300ms;
  return o;
}

int wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// Child: rank `rank` sends a memfd holding `text` to rank 0.
pid_t spawn_sender(const std::string& dir, int rank, const std::string& text, int delay_ms = 0) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  auto channel = UnixFdChannel::open(options_for(rank, dir));
  if (!channel.is_ok()) ::_exit(2);
  const int memfd = ::memfd_create("engramlab-test", MFD_CLOEXEC);
  if (::write(memfd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) ::_exit(3);
  const int32_t header = rank * 11;
  const Status s = (*channel)->send_fd(0, memfd, std::as_bytes(std::span(&header, 1)));
  ::close(memfd);
  if (!s.is_ok()) {
    std::fprintf(stderr, "sender: %s\n", s.to_string().c_str());
    ::_exit(4);
  }
  ::_exit(0);
}

std::string read_all(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST(HostFdChannel, MemfdCrossesProcessesAndIsUsable) {
  Scratch scratch;
  auto receiver = UnixFdChannel::open(options_for(0, scratch.dir));
  ASSERT_TRUE(receiver.is_ok()) << receiver.status().to_string();
  struct stat st{};
  ASSERT_EQ(::stat(scratch.dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "only this user may reach the sockets";

  const pid_t a = spawn_sender(scratch.dir, 1, "rows of rank one");
  const pid_t b = spawn_sender(scratch.dir, 2, "rows of rank two");
  // Ask for rank 2 first: rank 1's fd, if it arrives first, waits in the queue.
  auto from2 = (*receiver)->recv_fd(2);
  auto from1 = (*receiver)->recv_fd(1);
  EXPECT_EQ(wait_child(a), 0);
  EXPECT_EQ(wait_child(b), 0);
  ASSERT_TRUE(from1.is_ok()) << from1.status().to_string();
  ASSERT_TRUE(from2.is_ok()) << from2.status().to_string();
  EXPECT_EQ(read_all(from1->fd), "rows of rank one");
  EXPECT_EQ(read_all(from2->fd), "rows of rank two");
  int32_t header = 0;
  ASSERT_EQ(from2->header.size(), sizeof(header));
  std::memcpy(&header, from2->header.data(), sizeof(header));
  EXPECT_EQ(header, 22);
  // The received fd is ours: it maps and writes like the sender's.
  void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, from1->fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(std::memcmp(p, "rows of rank one", 16), 0);
  ::munmap(p, 4096);
  ::close(from1->fd);
  ::close(from2->fd);
  EXPECT_EQ((*receiver)->refused_connections(), 0);
}

// Connects to rank 0's socket, sends `token` in a well-formed hello, and
// returns 0 when nothing at all comes back (EOF or reset).
// `connected_fd` (if >= 0) gets one byte once the stranger's hello is sent,
// so the test starts the legitimate sender only after the stranger is queued
// (accept order is connect order); without it a loaded machine can let the
// legitimate fd arrive first and the receiver return before the stranger.
int stranger_gets_nothing(const std::string& path, const std::string& token, int connected_fd = -1) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return errno == EACCES ? 10 : 11;
  struct { uint32_t magic, version; int32_t src, dst; uint32_t token_bytes, header_bytes; } hello{
      0x45464431, 1, 1, 0, static_cast<uint32_t>(token.size()), 0};
  if (::send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) < 0) return 12;
  ::send(fd, token.data(), token.size(), MSG_NOSIGNAL);
  if (connected_fd >= 0) {
    const char ready = 'c';
    if (::write(connected_fd, &ready, 1) != 1) return 15;
  }
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 5000) <= 0) return 13;  // never even closed
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, 0);
  return (n == 0 || (n < 0 && errno == ECONNRESET)) ? 0 : 14;
}

// Waits (bounded) for the stranger's "queued" byte.
bool wait_connected(int read_fd) {
  pollfd p{read_fd, POLLIN, 0};
  char byte;
  return ::poll(&p, 1, 10000) == 1 && ::read(read_fd, &byte, 1) == 1;
}

TEST(HostFdChannel, ConnectionWithoutTheTokenGetsNothingAndTheRankCarriesOn) {
  Scratch scratch;
  auto receiver = UnixFdChannel::open(options_for(0, scratch.dir));
  ASSERT_TRUE(receiver.is_ok());
  const std::string path = (*receiver)->socket_path();
  int queued[2];
  ASSERT_EQ(::pipe(queued), 0);
  const pid_t stranger = ::fork();
  if (stranger == 0) ::_exit(stranger_gets_nothing(path, "not-the-job-token-at-all", queued[1]));
  ASSERT_TRUE(wait_connected(queued[0]));
  ::close(queued[0]);
  ::close(queued[1]);
  const pid_t sender = spawn_sender(scratch.dir, 1, "legit", /*delay_ms=*/0);
  auto got = (*receiver)->recv_fd(1);
  EXPECT_EQ(wait_child(stranger), 0) << "the stranger must get EOF and no bytes";
  EXPECT_EQ(wait_child(sender), 0);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(read_all(got->fd), "legit");
  ::close(got->fd);
  EXPECT_EQ((*receiver)->refused_connections(), 1);
}

// Drops to uid/gid nobody; with `keep_dac_override` keeps just enough
// privilege to reach the 0700 directory, so the receiver's SO_PEERCRED check
// is what must refuse it.
bool become_nobody(bool keep_dac_override) {
  if (keep_dac_override && ::prctl(PR_SET_KEEPCAPS, 1) != 0) return false;
  if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) return false;
  if (!keep_dac_override) return true;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  data[0].effective = 1u << CAP_DAC_OVERRIDE;
  return ::syscall(SYS_capset, &header, data) == 0;
}

TEST(HostFdChannel, AnotherUidIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to fork a child that setuid()s to nobody";
  Scratch scratch;
  auto receiver = UnixFdChannel::open(options_for(0, scratch.dir));
  ASSERT_TRUE(receiver.is_ok());
  const std::string path = (*receiver)->socket_path();

  // Plain nobody: the 0700 directory already stops it.
  const pid_t plain = ::fork();
  if (plain == 0) ::_exit(become_nobody(false) ? stranger_gets_nothing(path, kToken) : 20);
  EXPECT_EQ(wait_child(plain), 10) << "connect as nobody must fail with EACCES";

  // Nobody that can pass the directory, and even knows the token: SO_PEERCRED refuses it.
  int queued[2];
  ASSERT_EQ(::pipe(queued), 0);
  const pid_t sneaky = ::fork();
  if (sneaky == 0) ::_exit(become_nobody(true) ? stranger_gets_nothing(path, kToken, queued[1]) : 20);
  ASSERT_TRUE(wait_connected(queued[0])) << "the nobody child never connected";
  ::close(queued[0]);
  ::close(queued[1]);
  const pid_t sender = spawn_sender(scratch.dir, 1, "legit", /*delay_ms=*/0);
  auto got = (*receiver)->recv_fd(1);
  EXPECT_EQ(wait_child(sneaky), 0) << "another uid must get EOF and no bytes";
  EXPECT_EQ(wait_child(sender), 0);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ::close(got->fd);
  EXPECT_EQ((*receiver)->refused_connections(), 1);
}

// Sends to rank 2, which never opened its channel; `hosts` (if any) is what
// the job knows of every rank's host.
Status send_to_missing_rank(const std::string& dir, std::vector<HostIdentity> hosts = {}) {
  auto o = options_for(0, dir);
  o.deadline = 60000ms;  // far beyond the 300 ms socket wait the send gives up after
  auto channel = UnixFdChannel::open(o);
  EXPECT_TRUE(channel.is_ok()) << channel.status().to_string();
  if (!channel.is_ok()) return channel.status();
  if (!hosts.empty()) (*channel)->set_peer_hosts(std::move(hosts));
  const int memfd = ::memfd_create("x", MFD_CLOEXEC);
  const auto start = std::chrono::steady_clock::now();
  Status s = (*channel)->send_fd(2, memfd, {});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ::close(memfd);
  EXPECT_EQ(s.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(s.context().rank, 0);
  EXPECT_EQ(s.context().peer, 2);
  EXPECT_EQ(s.context().step, "send");
  EXPECT_NE(s.message().find("no socket " + dir + "/rank-2.sock (searched " + dir + " for 300 ms)"),
            std::string::npos)
      << s.message();
  return s;
}

TEST(HostFdChannel, MissingPeerSocketWithHostsUnknownNamesTheDirectoryAndBothCauses) {
  Scratch scratch;
  const Status s = send_to_missing_rank(scratch.dir);
  EXPECT_NE(s.message().find("is on another host (POSIX fds cannot cross hosts"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("or it never opened its fd channel in this directory"), std::string::npos) << s.message();
}

TEST(HostFdChannel, MissingPeerSocketOnThisHostDoesNotBlameAnotherHost) {
  Scratch scratch;
  const HostIdentity here{"nodeA", "boot-1"};
  const Status s = send_to_missing_rank(scratch.dir, {here, here, here});
  EXPECT_NE(s.message().find("Rank 2 reports this host (nodeA/boot-1) too"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ENGRAMLAB_SOCKET_DIR or XDG_RUNTIME_DIR differ"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("another host"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("cannot cross hosts"), std::string::npos) << s.message();
}

TEST(HostFdChannel, MissingPeerSocketOnAnotherHostNamesBothHosts) {
  Scratch scratch;
  // Same hostname, another boot: another machine (or VM) that shares a name.
  const Status s = send_to_missing_rank(scratch.dir, {{"nodeA", "boot-1"}, {"nodeA", "boot-1"}, {"nodeA", "boot-2"}});
  EXPECT_NE(s.message().find("Rank 2 is on host nodeA/boot-2, this rank on nodeA/boot-1: POSIX fds cannot cross "
                             "hosts"),
            std::string::npos)
      << s.message();
}

// The default directory (no socket_dir given): the receiver listens in it and
// the sender sends into it. Before the fix the send went to /rank-0.sock.
TEST(HostFdChannel, ChannelsInTheDefaultDirectoryPassAnFd) {
  Scratch scratch;
  ::setenv("XDG_RUNTIME_DIR", scratch.base.c_str(), 1);  // inherited by the forked sender
  auto receiver = UnixFdChannel::open(options_for(0, ""));
  ASSERT_TRUE(receiver.is_ok()) << receiver.status().to_string();
  EXPECT_EQ((*receiver)->socket_dir(), default_socket_dir("fdtest"));
  EXPECT_EQ((*receiver)->socket_dir(), scratch.base + "/engramlab/fdtest");
  EXPECT_EQ((*receiver)->socket_path(), scratch.base + "/engramlab/fdtest/rank-0.sock");
  const pid_t sender = spawn_sender("", 1, "through the default directory");
  auto got = (*receiver)->recv_fd(1);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(read_all(got->fd), "through the default directory");
  ::close(got->fd);
  EXPECT_EQ(wait_child(sender), 0);
  receiver->reset();
  EXPECT_FALSE(fs::exists(scratch.base + "/engramlab")) << "the last rank out removes the default directories";
  ::unsetenv("XDG_RUNTIME_DIR");
}

TEST(HostFdChannel, APeerSocketPathOutsideTheJobsDirectoryIsRefused) {
  Scratch scratch;
  fs::create_directories(scratch.dir);
  const std::string in = scratch.dir + "/rank-3.sock";
  EXPECT_TRUE(check_peer_socket_path(scratch.dir, in).is_ok());  // absent yet: the send waits for it
  // The defect's own path: an empty directory made the peer's socket /rank-0.sock.
  const Status root = check_peer_socket_path("", fd_socket_path("", 0));
  EXPECT_EQ(root.code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(root.message().find("refusing to send an fd to /rank-0.sock"), std::string::npos) << root.message();
  EXPECT_NE(root.message().find("not an absolute path"), std::string::npos) << root.message();
  EXPECT_EQ(check_peer_socket_path("relative/dir", "relative/dir/rank-0.sock").code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(check_peer_socket_path(scratch.dir + "/..", scratch.dir + "/../rank-0.sock").code(),
            ErrorCode::kPermissionDenied);
  EXPECT_EQ(check_peer_socket_path(scratch.dir, scratch.base + "/rank-0.sock").code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(check_peer_socket_path(scratch.dir, scratch.dir + "/sub/rank-0.sock").code(),
            ErrorCode::kPermissionDenied);
  EXPECT_EQ(check_peer_socket_path(scratch.dir, scratch.dir + "/rank-.sock").code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(check_peer_socket_path(scratch.dir, scratch.dir + "/rank-1x.sock").code(), ErrorCode::kPermissionDenied);
  // Something that is not a socket at the name: a file, a symlink.
  { std::FILE* f = std::fopen((scratch.dir + "/rank-4.sock").c_str(), "w"); std::fclose(f); }
  const Status file = check_peer_socket_path(scratch.dir, scratch.dir + "/rank-4.sock");
  EXPECT_EQ(file.code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(file.message().find("it is not a socket"), std::string::npos) << file.message();
  fs::create_symlink("/tmp", scratch.dir + "/rank-5.sock");
  const Status link = check_peer_socket_path(scratch.dir, scratch.dir + "/rank-5.sock");
  EXPECT_NE(link.message().find("it is a symlink"), std::string::npos) << link.message();
}

// A symlink at a peer's name that points at a live socket elsewhere: the send
// is refused before connecting, so the listener there sees no connection.
TEST(HostFdChannel, ASymlinkedPeerSocketIsRefusedBeforeConnecting) {
  Scratch scratch;
  auto sender = UnixFdChannel::open(options_for(0, scratch.dir));
  ASSERT_TRUE(sender.is_ok());
  const std::string elsewhere = scratch.base + "/elsewhere.sock";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, elsewhere.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  fs::create_symlink(elsewhere, scratch.dir + "/rank-1.sock");
  const int memfd = ::memfd_create("x", MFD_CLOEXEC);
  const Status s = (*sender)->send_fd(1, memfd, {});
  ::close(memfd);
  EXPECT_EQ(s.code(), ErrorCode::kPermissionDenied) << s.to_string();
  EXPECT_EQ(s.context().peer, 1);
  EXPECT_NE(s.message().find("it is a symlink"), std::string::npos) << s.message();
  pollfd p{listener, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 100), 0) << "nothing connected to the socket the symlink points at";
  ::close(listener);
  fs::remove(scratch.dir + "/rank-1.sock");
}

TEST(HostFdChannel, RecvFromASilentPeerEndsAtTheDeadline) {
  Scratch scratch;
  auto o = options_for(0, scratch.dir);
  o.deadline = 300ms;
  auto channel = UnixFdChannel::open(o);
  ASSERT_TRUE(channel.is_ok());
  const auto start = std::chrono::steady_clock::now();
  auto got = (*channel)->recv_fd(1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_EQ(got.status().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(got.status().context().peer, 1);
}

// Idle connections of our own user queued ahead of the real sender: each may
// take its handshake time, but the receive as a whole ends at its deadline.
TEST(HostFdChannel, RecvEndsAtItsDeadlineHoweverManyIdleConnectionsQueue) {
  Scratch scratch;
  auto o = options_for(0, scratch.dir);
  o.deadline = 1000ms;
  // Longer than the bound below: had the handshakes not been held to the
  // deadline, the first idle connection alone would hold the receive 10 s.
  o.handshake_timeout = 10000ms;
  auto channel = UnixFdChannel::open(o);
  ASSERT_TRUE(channel.is_ok()) << channel.status().to_string();
  std::vector<int> idle;
  for (int i = 0; i < 12; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, (*channel)->socket_path().c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  auto got = (*channel)->recv_fd(1);
  const auto took = std::chrono::steady_clock::now() - start;
  for (int fd : idle) ::close(fd);
  ASSERT_EQ(got.status().code(), ErrorCode::kUnavailable);
  EXPECT_LT(took, 5s) << "12 idle connections must not stretch a 1 s deadline";
  EXPECT_GE(took, 900ms);
}

// The job's socket directory goes when the last rank leaves, passing or not.
TEST(HostFdChannel, TheSocketDirectoryIsRemovedWhenTheLastRankLeaves) {
  Scratch scratch;
  {
    auto a = UnixFdChannel::open(options_for(0, scratch.dir));
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    {
      auto b = UnixFdChannel::open(options_for(1, scratch.dir));
      ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    }
    EXPECT_TRUE(fs::exists(scratch.dir)) << "rank 0 still listens there";
    EXPECT_FALSE(fs::exists(scratch.dir + "/rank-1.sock"));
  }
  EXPECT_FALSE(fs::exists(scratch.dir));
  // A failed open (the path is too long for a Unix socket) leaves nothing either.
  const std::string deep = scratch.base + "/" + std::string(120, 'd');
  auto too_long = UnixFdChannel::open(options_for(0, deep));
  ASSERT_EQ(too_long.status().code(), ErrorCode::kInvalidArgument) << too_long.status().to_string();
  EXPECT_FALSE(fs::exists(deep));
}

TEST(HostFdChannel, SocketDirectoryOpenToOthersIsRefused) {
  Scratch scratch;
  ASSERT_EQ(::mkdir(scratch.dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(scratch.dir.c_str(), 0777), 0);
  auto channel = UnixFdChannel::open(options_for(0, scratch.dir));
  ASSERT_EQ(channel.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(channel.status().message().find("mode 777"), std::string::npos) << channel.status().message();
}

}  // namespace
}  // namespace engram::ipc
