// Two "hosts" on one machine, each its own network, mount and UTS namespace
// (tools/netns/two_hosts.sh: hostnames hostA/hostB, private tmpfs on the fd
// socket dir and the shm dir, a veth pair for TCP). The ranks meet over TCP
// and see different host identities (same boot id, different hostnames);
// a POSIX-fd send from one to the other fails with the cross-host error and
// the waiting receiver gives up at its deadline.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Why two-host namespaces cannot be built here, or "" when they can.
std::string namespaces_unavailable() {
  if (::geteuid() != 0) return "needs root (unshare --net --mount --uts, mount, ip link)";
  if (std::system("command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1") != 0) {
    return "unshare(1) or ip(8) is not installed";
  }
  if (std::system("unshare --net --mount --uts --propagation private sh -c "
                  "'hostname probe && ip link add probeA type veth peer name probeB' >/dev/null 2>&1") != 0) {
    return "creating net/mount/UTS namespaces or a veth pair is not permitted here";
  }
  return "";
}

TEST(HostNamespaces, FdSendBetweenTwoHostsFailsWithTheCrossHostErrorInBoundedTime) {
  if (const std::string why = namespaces_unavailable(); !why.empty()) GTEST_SKIP() << "two-host namespaces: " << why;
  char templ[] = "/tmp/engramlab-twohosts-XXXXXX";
  const std::string work = ::mkdtemp(templ);
  const std::string command = "MASTER_PORT=" + std::to_string(20000 + ::getpid() % 20000) + " sh " +
                              ENGRAM_SOURCE_DIR + "/tools/netns/two_hosts.sh " + work + " " + ENGRAM_BINARY_DIR +
                              "/tests/host_worker --fd-to-rank 1 --op-timeout-ms 2000 2>&1";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string a = slurp(work + "/out-hostA");
  const std::string b = slurp(work + "/out-hostB");
  fs::remove_all(work);
  ASSERT_EQ(WEXITSTATUS(status), 0) << "hostA:\n" << a << "\nhostB:\n" << b;
  EXPECT_LT(took, 15s);

  // They met over TCP and tell each other's hosts apart by hostname.
  EXPECT_NE(a.find("host of rank 1 is hostB|"), std::string::npos) << a;
  EXPECT_NE(b.find("host of rank 0 is hostA|"), std::string::npos) << b;
  EXPECT_NE(a.find("all ranks on one host: no"), std::string::npos) << a;

  // The fd cannot cross: the sender names the peer, the path, ENOENT and why.
  EXPECT_NE(a.find("send_fd to rank 1: unavailable (rank 0, peer 1, step send)"), std::string::npos) << a;
  EXPECT_NE(a.find("/run/sockets/rank-1.sock does not exist (No such file or directory)"), std::string::npos) << a;
  EXPECT_NE(a.find("POSIX fds cannot cross hosts"), std::string::npos) << a;
  // The receiver's wait is bounded too.
  EXPECT_NE(b.find("recv_fd from rank 0: unavailable (rank 1, peer 0, step recv)"), std::string::npos) << b;
  EXPECT_NE(b.find("waited 2000 ms"), std::string::npos) << b;
}

}  // namespace
