// Two "hosts" on one machine, each its own network, mount and UTS namespace
// (tools/netns/two_hosts.sh: hostnames hostA/hostB, private tmpfs on the fd
// socket dir and the shm dir, a veth pair for TCP). The ranks meet over TCP
// and see different host identities (same boot id, different hostnames);
// a POSIX-fd send from one to the other fails with the cross-host error and
// the waiting receiver gives up at its deadline. Then the same two hosts
// with each launcher's environment: torchrun's (its agent holding MASTER_PORT
// on hostA), Slurm's (the address from the node list, by name), Open MPI's
// and two `engramlab launch --nnodes 2` nodes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "two_hosts.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using engram::testing::run_two_hosts;
using engram::testing::slurp;
using engram::testing::TwoHostRun;
const auto namespaces_unavailable = engram::testing::two_host_namespaces_unavailable;

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
  EXPECT_NE(a.find("no socket " + work + "/run/sockets/rank-1.sock (searched " + work + "/run/sockets for"),
            std::string::npos)
      << a;
  EXPECT_NE(a.find("Rank 1 is on host hostB/"), std::string::npos) << a;
  EXPECT_NE(a.find("this rank on hostA/"), std::string::npos) << a;
  EXPECT_NE(a.find("POSIX fds cannot cross hosts"), std::string::npos) << a;
  // The receiver's wait is bounded too.
  EXPECT_NE(b.find("recv_fd from rank 0: unavailable (rank 1, peer 0, step recv)"), std::string::npos) << b;
  EXPECT_NE(b.find("waited 2000 ms"), std::string::npos) << b;
}

// Each launcher's environment across the two hosts: the ranks meet over the
// veth pair and tell each other's hosts apart.
class LaunchersAcrossHosts : public ::testing::TestWithParam<std::string> {};

TEST_P(LaunchersAcrossHosts, RanksMeetAcrossTheTwoHosts) {
  if (const std::string why = namespaces_unavailable(); !why.empty()) GTEST_SKIP() << "two-host namespaces: " << why;
  const std::string launcher = GetParam();
  const std::string worker = std::string(ENGRAM_BINARY_DIR) + "/tests/host_worker --fd-to-rank 1 --op-timeout-ms 3000";
  std::string command = worker;
  if (launcher == "torchrun") command += " --hold-agent-port 1";  // rank 0's host: the agent holds MASTER_PORT
  if (launcher == "engramlab") {
    // Each node's launcher, as a user starts it on each host.
    command = "sh -c 'exec " + std::string(ENGRAM_BINARY_DIR) +
              "/apps/engramlab launch --nnodes 2 --node-rank $NODE --nproc-per-node 1 --master-addr 10.231.0.1 "
              "--master-port " + std::to_string(21000 + ::getpid() % 9000) + " -- " + worker + " \"$@\"' sh";
  }
  const auto start = std::chrono::steady_clock::now();
  const TwoHostRun r = run_two_hosts(launcher, command);
  ASSERT_EQ(WEXITSTATUS(r.status), 0) << "hostA:\n" << r.a << "\nhostB:\n" << r.b;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_NE(r.a.find("host of rank 1 is hostB|"), std::string::npos) << r.a;
  EXPECT_NE(r.b.find("host of rank 0 is hostA|"), std::string::npos) << r.b;
  const std::string named = launcher == "engramlab" ? "torchrun-style" : launcher == "ompi" ? "open mpi" : launcher;
  EXPECT_NE(r.a.find("launcher " + named), std::string::npos) << r.a;
  EXPECT_NE(r.b.find("launcher " + named), std::string::npos) << r.b;
  if (launcher == "torchrun") {
    EXPECT_NE(r.a.find("holding MASTER_PORT"), std::string::npos) << r.a;
    EXPECT_NE(r.b.find("MASTER_PORT + 1"), std::string::npos) << r.b;
  }
  if (launcher == "slurm") {
    EXPECT_NE(r.b.find("rendezvous hostA:"), std::string::npos) << r.b;
  }
  if (launcher == "engramlab") {
    EXPECT_NE(r.b.find("[rank 1] rank 1: host of rank 0 is hostA|"), std::string::npos) << r.b;
  }
}

INSTANTIATE_TEST_SUITE_P(EachLauncher, LaunchersAcrossHosts,
                         ::testing::Values("torchrun", "slurm", "ompi", "engramlab"),
                         [](const auto& info) { return info.param; });

}  // namespace
