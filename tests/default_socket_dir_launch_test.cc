// fd passing between real ranks in the default configuration: `engramlab
// launch` with no ENGRAMLAB_SOCKET_DIR, no XDG_RUNTIME_DIR and no socket flag,
// so every rank opens the default socket directory and must send into that
// same directory (a send once went to /rank-N.sock at the filesystem root).
// The emulator cannot catch this: the ranks here are real processes, first
// passing memfds around a ring (tests/host_worker), then running the
// runtime's POSIX-fd handle exchange with memfds standing in for GPU memory
// (tests/exchange_worker). Afterwards the job's socket directory is gone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "backends/ipc/socket_dir.h"
#include "tests/process_run.h"

namespace {

namespace fs = std::filesystem;

using engram::testing::ProcessRun;
using engram::testing::count;
using engram::testing::run;

class DefaultSocketDirLaunch : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    char templ[] = "/dev/shm/engramlab-defaultsock-XXXXXX";
    shm_dir_ = ::mkdtemp(templ);
    job_id_ = "defsock" + std::to_string(::getpid()) + "n" + std::to_string(GetParam());
  }
  void TearDown() override { fs::remove_all(shm_dir_); }
  // No variable and no flag names a socket directory: the ranks resolve the default.
  std::string launch(const std::string& worker) const {
    return "env -u ENGRAMLAB_SOCKET_DIR -u XDG_RUNTIME_DIR ENGRAMLAB_SHM_DIR=" + shm_dir_ + " " + ENGRAM_BINARY_DIR +
           "/apps/engramlab launch -n " + std::to_string(GetParam()) + " --job-id " + job_id_ +
           " --grace-ms 2000 -- " + ENGRAM_BINARY_DIR + "/tests/" + worker;
  }
  // Where the ranks listened, resolved as they resolved it (this process's
  // environment without XDG_RUNTIME_DIR, as theirs).
  std::string job_socket_dir() const {
    ::unsetenv("XDG_RUNTIME_DIR");
    return engram::ipc::default_socket_dir(job_id_);
  }
  std::string shm_dir_, job_id_;
};

TEST_P(DefaultSocketDirLaunch, RanksPassMemfdsAroundARing) {
  const int n = GetParam();
  const ProcessRun r = run(launch("host_worker --shm-dir " + shm_dir_ + " --bytes 4096 --op-timeout-ms 3000"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "SELFTEST OK"), static_cast<size_t>(n)) << r.output;
  EXPECT_EQ(count(r.output, "reads \"hello from rank"), static_cast<size_t>(n)) << r.output;
  EXPECT_EQ(r.output.find("/rank-0.sock does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(job_socket_dir())) << "the last rank out removes the job's socket directory";
}

TEST_P(DefaultSocketDirLaunch, TheRuntimesHandleExchangeSharesEveryRanksAllocation) {
  const int n = GetParam();
  const ProcessRun r = run(launch("exchange_worker --bytes 3145728"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // 3 MiB rounds up to two 2 MiB granules; every rank maps every peer.
  EXPECT_EQ(count(r.output, "handle posix_fd, " + std::to_string(n) + " ranks, 4194304 bytes each, socket dir "
                            "default: EXCHANGE OK"),
            static_cast<size_t>(n))
      << r.output;
  EXPECT_EQ(count(r.output, "NOTHING LEFT"), static_cast<size_t>(n)) << r.output;
  EXPECT_FALSE(fs::exists(job_socket_dir()));
}

TEST_P(DefaultSocketDirLaunch, AnExchangeEveryRankRefusesLeavesNothingBehind) {
  const int n = GetParam();
  const ProcessRun r = run(launch("exchange_worker --bytes 2097152 --bytes-on-rank 1:4194304"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "EXCHANGE REFUSED: invalid_argument"), static_cast<size_t>(n)) << r.output;
  EXPECT_EQ(count(r.output, "every rank of the group must share equal-sized allocations"), static_cast<size_t>(n))
      << r.output;
  EXPECT_EQ(count(r.output, "NOTHING LEFT"), static_cast<size_t>(n)) << r.output;
  EXPECT_FALSE(fs::exists(job_socket_dir()));
}

INSTANTIATE_TEST_SUITE_P(Ranks, DefaultSocketDirLaunch, ::testing::Values(2, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
