// A split group's leader that runs out of file descriptors at its listen
// (issue 50, item 12: under `ulimit -n 22` the split failed "could not open a
// port", no word of descriptors). The leader's headroom check counts exactly
// what it needs, so only a descriptor taken meanwhile reaches that listen's
// EMFILE; an LD_PRELOAD interposer (emfile_listen_preload.cc) makes the
// leader's listen fail so. Every rank must then name descriptors and
// RLIMIT_NOFILE, the leader itself and its peers pointing at it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/process_run.h"
#include "tests/sanitizer_build.h"
#include "tests/temp_dir.h"

namespace engram {
namespace {

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
const std::string kWorker = std::string(ENGRAM_BINARY_DIR) + "/tests/host_worker";
const std::string kPreload = std::string(ENGRAM_BINARY_DIR) + "/tests/libemfile_listen_preload.so";

TEST(SplitListenEmfile, ALeaderOutOfDescriptorsAtItsListenIsNamedByEveryRank) {
  ENGRAM_SKIP_UNDER_SANITIZERS("an LD_PRELOAD interposer cannot come before the sanitizer runtime");
  testing::TempDir shm("/dev/shm/engramlab-emfile");
  testing::TempDir run_dir("/tmp/engramlab-emfile-run");
  // host_worker's selftest splits the world by rank % 2 with key -rank: rank
  // 2 leads color 0, and its first IPv4 listen is that split's (rank 0 holds
  // the rendezvous).
  const std::string job = "emfile-" + std::to_string(::getpid());
  const auto r = testing::run("XDG_RUNTIME_DIR=" + run_dir.path + " LD_PRELOAD=" + kPreload +
                              " ENGRAMLAB_TEST_EMFILE_LISTEN_RANK=2 ENGRAMLAB_TEST_EMFILE_LISTEN_NTH=1 " + kEngramlab +
                              " launch -n 4 --no-rank-prefix --grace-ms 500 --job-id " + job + " -- " + kWorker +
                              " --shm-dir " + shm.path + " --op-timeout-ms 5000");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("out of file descriptors: cannot open the listening socket of group"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("RLIMIT_NOFILE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 2 has too few file descriptors to join group"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("could not open a port"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("SELFTEST OK"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace engram
