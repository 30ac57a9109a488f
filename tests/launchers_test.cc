// Ranks started the way each cluster launcher starts them, on this host:
// torchrun's environment with its agent holding MASTER_PORT, Slurm's (no
// port, no address), Open MPI's, and `engramlab launch` as one node or two
// nodes of one job; then what a launcher owes its ranks: output prefixed by
// rank, signals forwarded, and no rank left alive when the launcher is
// SIGKILLed. (tests/host_namespace_test.cc does the same across two hosts.)
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/process_run.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using engram::testing::ProcessRun;
using engram::testing::count;
using engram::testing::run;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
const std::string kWorker = std::string(ENGRAM_BINARY_DIR) + "/tests/host_worker";
const std::string kToken = "0123456789abcdef0123456789abcdef";

// Binds 127.0.0.1:port (listening when `listen_too`); false when taken.
bool bind_loopback(int fd, int port, bool listen_too) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && (!listen_too || ::listen(fd, 16) == 0);
}

// Listens on 127.0.0.1:<a free port> and keeps it, as torchrun's agent keeps
// its store's port. The port and the one above it are picked below Linux's
// ephemeral range (32768 up) with both free, so no other test's listener or
// outgoing connection is handed either while this test runs.
struct HeldPort {
  int fd = -1;
  int port = 0;
  HeldPort() {
    const int first = 20000 + static_cast<int>(::getpid() % 6000) * 2;
    for (int i = 0; i < 2000 && port == 0; ++i) {
      const int p = 20000 + (first - 20000 + 2 * i) % 12000;
      const int candidate = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const int above = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const bool free_pair = bind_loopback(candidate, p, true) && bind_loopback(above, p + 1, false);
      ::close(above);
      if (free_pair) {
        fd = candidate;
        port = p;
      } else {
        ::close(candidate);
      }
    }
  }
  ~HeldPort() { ::close(fd); }
};

class Launchers : public ::testing::Test {
 protected:
  void SetUp() override {
    char shm[] = "/dev/shm/engramlab-launcherstest-XXXXXX";
    shm_dir_ = ::mkdtemp(shm);
    char work[] = "/tmp/engramlab-launcherstest-XXXXXX";
    work_ = ::mkdtemp(work);
  }
  void TearDown() override {
    fs::remove_all(shm_dir_);
    fs::remove_all(work_);
  }
  std::string worker_args() const {
    return " --shm-dir " + shm_dir_ + " --socket-dir " + work_ + "/sockets --op-timeout-ms 3000";
  }
  // Starts `ranks` workers, each with the environment `env_of(r)` gives, the
  // way a launcher would; returns every rank's output and whether all passed.
  template <typename EnvOf>
  ProcessRun start_ranks(int ranks, EnvOf env_of) const {
    std::string script = "st=0; pids=;";
    for (int r = 0; r < ranks; ++r) {
      script += " env " + env_of(r) + " " + kWorker + worker_args() + " > " + work_ + "/out-" + std::to_string(r) +
                " 2>&1 & pids=\"$pids $!\";";
    }
    script += " for p in $pids; do wait $p || st=1; done;";
    for (int r = 0; r < ranks; ++r) script += " cat " + work_ + "/out-" + std::to_string(r) + ";";
    script += " exit $st";
    return run("sh -c '" + script + "'");
  }
  std::string shm_dir_, work_;
};

std::string unique_id() { return std::to_string(::getpid()) + std::to_string(::time(nullptr) % 100000); }

TEST_F(Launchers, TorchrunEnvironmentWithTheAgentHoldingMasterPortRendezvousesOneAbove) {
  HeldPort agent;
  ASSERT_GT(agent.port, 0);
  const std::string id = unique_id();
  auto torchrun_env = [&](int r) {
    return "RANK=" + std::to_string(r) + " WORLD_SIZE=3 LOCAL_RANK=" + std::to_string(r) +
           " LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(agent.port) +
           " TORCHELASTIC_RUN_ID=t" + id + " TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0 "
           "ENGRAMLAB_JOB_TOKEN=" + kToken;
  };
  const ProcessRun r = start_ranks(3, torchrun_env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "SELFTEST OK"), 3u) << r.output;
  EXPECT_EQ(count(r.output, "launcher torchrun, job torchrun-t" + id), 3u) << r.output;
  EXPECT_EQ(count(r.output, "MASTER_PORT + 1 = " + std::to_string(agent.port + 1)), 3u) << r.output;

  // The control: without the agent-store flag rank 0 takes MASTER_PORT itself,
  // which the "agent" holds, and says so; the test can fail.
  auto plain_env = [&](int rank) {
    return "RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
           " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(agent.port) + " ENGRAMLAB_JOB_ID=clash" + id +
           " ENGRAMLAB_OP_TIMEOUT_MS=1000 ENGRAMLAB_JOB_TOKEN=" + kToken;
  };
  const ProcessRun clash = start_ranks(2, plain_env);
  EXPECT_NE(clash.exit_code, 0) << clash.output;
  EXPECT_NE(clash.output.find("Address already in use"), std::string::npos) << clash.output;
}

TEST_F(Launchers, SlurmEnvironmentWithNoPortOrAddressRendezvous) {
  const std::string id = unique_id();
  auto slurm_env = [&](int r) {
    return "SLURM_PROCID=" + std::to_string(r) + " SLURM_NTASKS=3 SLURM_LOCALID=" + std::to_string(r) +
           " SLURM_NTASKS_PER_NODE=3 SLURM_JOB_ID=" + id + " SLURM_STEP_ID=0 SLURM_STEP_NODELIST=localhost "
           "ENGRAMLAB_JOB_TOKEN=" + kToken;
  };
  const ProcessRun r = start_ranks(3, slurm_env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "SELFTEST OK"), 3u) << r.output;
  EXPECT_EQ(count(r.output, "launcher slurm, job slurm-" + id + "-0, rendezvous localhost:"), 3u) << r.output;
  EXPECT_EQ(count(r.output, "derived from SLURM_JOB_ID=" + id), 3u) << r.output;
}

TEST_F(Launchers, OpenMpiEnvironmentOnOneHostRendezvous) {
  const std::string id = unique_id();
  auto ompi_env = [&](int r) {
    return "OMPI_COMM_WORLD_RANK=" + std::to_string(r) + " OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=" +
           std::to_string(r) + " OMPI_COMM_WORLD_LOCAL_SIZE=3 PMIX_NAMESPACE=prterun-test-" + id +
           "@1 ENGRAMLAB_JOB_TOKEN=" + kToken;
  };
  const ProcessRun r = start_ranks(3, ompi_env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "SELFTEST OK"), 3u) << r.output;
  EXPECT_EQ(count(r.output, "launcher open mpi"), 3u) << r.output;
  EXPECT_EQ(count(r.output, "rendezvous 127.0.0.1:"), 3u) << r.output;
}

TEST_F(Launchers, LaunchAsTwoNodesOfOneJobOnThisHost) {
  // Two launchers, as two nodes would run them, with the token set once.
  HeldPort probe;  // a port that was free a moment ago
  const int port = probe.port;
  ::close(probe.fd);
  probe.fd = -1;
  const std::string node = kEngramlab + " launch --nnodes 2 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port " +
                           std::to_string(port) + " --node-rank ";
  const ProcessRun r = run("ENGRAMLAB_JOB_TOKEN=" + kToken + " sh -c '" + node + "0 -- " + kWorker + worker_args() +
                           " & a=$!; " + node + "1 -- " + kWorker + worker_args() + "; b=$?; wait $a; exit $(($? + b))'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "SELFTEST OK"), 4u) << r.output;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + ": SELFTEST OK"),
              std::string::npos)
        << r.output;
  EXPECT_NE(r.output.find("node 1 of 2, ranks 2-3 of 4"), std::string::npos) << r.output;
  // Both nodes derived the same job id without being told.
  EXPECT_EQ(count(r.output, "engramlab launch: job launch-127.0.0.1-" + std::to_string(port)), 2u) << r.output;

  // Across nodes without a token: the error carries the line to run.
  const ProcessRun no_token = run("env -u ENGRAMLAB_JOB_TOKEN " + node + "0 -- true");
  EXPECT_EQ(no_token.exit_code, 2) << no_token.output;
  EXPECT_NE(no_token.output.find("export ENGRAMLAB_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')"),
            std::string::npos)
      << no_token.output;
}

TEST_F(Launchers, OutputIsPrefixedWithTheRankUnlessAskedNot) {
  const std::string ranks = kEngramlab + " launch --nproc-per-node 3 ";
  const std::string say = " -- sh -c 'echo out-$RANK; echo err-$RANK >&2; printf no-newline-$RANK'";
  const ProcessRun r = run("{ " + ranks + say + " 2>" + work_ + "/err; }");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream err_file(work_ + "/err");
  std::stringstream err;
  err << err_file.rdbuf();
  for (int rank = 0; rank < 3; ++rank) {
    const std::string n = std::to_string(rank);
    EXPECT_NE(r.output.find("[rank " + n + "] out-" + n + "\n"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("[rank " + n + "] no-newline-" + n + "\n"), std::string::npos) << r.output;
    EXPECT_NE(err.str().find("[rank " + n + "] err-" + n + "\n"), std::string::npos) << err.str();
  }
  const ProcessRun plain = run(ranks + "--no-rank-prefix" + say);
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("[rank"), std::string::npos) << plain.output;
  EXPECT_EQ(count(plain.output, "out-"), 3u) << plain.output;
}

// The pids the ranks wrote, once all have.
std::vector<pid_t> wait_for_pids(const std::string& dir, int ranks) {
  std::vector<pid_t> pids;
  for (int attempt = 0; attempt < 200 && static_cast<int>(pids.size()) < ranks; ++attempt) {
    pids.clear();
    for (int r = 0; r < ranks; ++r) {
      std::ifstream in(dir + "/pid-" + std::to_string(r));
      pid_t pid = 0;
      if (in >> pid) pids.push_back(pid);
    }
    std::this_thread::sleep_for(50ms);
  }
  return pids;
}

// Gone, or a zombie nobody reaped yet (a container's PID 1 may not).
bool dead(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  const size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

TEST_F(Launchers, AKilledLauncherLeavesNoRankAlive) {
  const std::string cmd = kEngramlab + " launch --nproc-per-node 3 -- sh -c 'echo $$ > " + work_ +
                          "/pid-$LOCAL_RANK; exec sleep 60'";
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > /dev/null 2>&1").c_str(), nullptr);
    ::_exit(127);
  }
  const std::vector<pid_t> ranks = wait_for_pids(work_, 3);
  ASSERT_EQ(ranks.size(), 3u);
  for (pid_t p : ranks) EXPECT_FALSE(dead(p));
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  bool all_dead = false;
  for (const auto until = std::chrono::steady_clock::now() + 30s; !all_dead && std::chrono::steady_clock::now() < until;) {
    all_dead = true;
    for (pid_t p : ranks) all_dead = all_dead && dead(p);
    if (!all_dead) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(all_dead) << "a rank outlived its SIGKILLed launcher";
}

TEST_F(Launchers, SignalsAreForwardedToEveryRank) {
  const std::string cmd = kEngramlab + " launch --nproc-per-node 2 --grace-ms 60000 -- sh -c 'trap \"echo got-TERM; "
                          "exit 3\" TERM; echo $$ > " + work_ + "/pid-$LOCAL_RANK; while :; do sleep 0.05; done'";
  int out_pipe[2];
  ASSERT_EQ(::pipe(out_pipe), 0);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(out_pipe[1], 2);
    ::close(out_pipe[0]);
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ASSERT_EQ(wait_for_pids(work_, 2).size(), 2u);
  const auto start = std::chrono::steady_clock::now();
  ::kill(launcher, SIGTERM);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  std::string output;
  char buf[4096];
  for (ssize_t n; (n = ::read(out_pipe[0], buf, sizeof(buf))) > 0;) output.append(buf, static_cast<size_t>(n));
  ::close(out_pipe[0]);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << "the ranks stopped on the forwarded signal, not SIGKILL";
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << output;
  EXPECT_NE(output.find("got SIGTERM: forwarding it to the 2 running ranks"), std::string::npos) << output;
  EXPECT_NE(output.find("[rank 0] got-TERM"), std::string::npos) << output;
  EXPECT_NE(output.find("[rank 1] got-TERM"), std::string::npos) << output;
}

}  // namespace
