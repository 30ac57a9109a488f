// The bridge from a deployment file to a cluster, on real processes: two
// "hosts" on this machine (tests/two_hosts.h: hostA and hostB, each its own
// network, mount and UTS namespace with a 16 MiB tmpfs as its shm dir),
// joined by the TCP rendezvous every launched rank uses.
//   - `doctor --emit-host` under the launcher: rank 0 prints the cluster's
//     hosts: entries, which parse back with our own parser and name both.
//   - `doctor --file` with that file passes; with a file whose facts are
//     wrong (hostB's /dev/shm 190 GiB, an IMEX channel on hostA) both ranks
//     fail and rank 0 names every difference with both values.
//   - `acceptance --file` reaches the same comparison before it needs a GPU:
//     hostB's rank names its difference, and hostA's rank, whose own facts
//     match, fails too, naming rank 1, with no table built.
// No GPU is made visible (CUDA_VISIBLE_DEVICES=), so the outcome is the same
// on any machine. Skipped, saying why, without root or namespaces.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <string>

#include "core/deployment_file/deployment_as_written.h"
#include "engramlab_command.h"
#include "temp_dir.h"
#include "two_hosts.h"

namespace engram::testing {
namespace {

// `engramlab ARGS` as each host's rank, its shm dir (the host's own 16 MiB
// tmpfs) and socket dir the ones two_hosts.sh appends, no GPU visible.
std::string on_each_host(const std::string& args) {
  return "sh -c 'ENGRAMLAB_SOCKET_DIR=$2 ENGRAMLAB_SHM_DIR=$4 CUDA_VISIBLE_DEVICES= exec " + engramlab_path() + " " +
         args + "' sh";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// `text` with the n-th (from 0) `from` replaced by `to`.
std::string replace_nth(std::string text, const std::string& from, const std::string& to, int n) {
  size_t at = text.find(from);
  for (int i = 0; i < n && at != std::string::npos; ++i) at = text.find(from, at + 1);
  EXPECT_NE(at, std::string::npos) << from << " #" << n << " in\n" << text;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

class BridgeAcrossTwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = two_host_namespaces_unavailable(); !why.empty())
      GTEST_SKIP() << "two-host namespaces: " << why;
    ASSERT_FALSE(dir_.path.empty());
    // The cluster as doctor writes it.
    const TwoHostRun emitted = run_two_hosts("plain", on_each_host("doctor --emit-host"));
    ASSERT_EQ(exit_code(emitted.status), 0) << "hostA:\n" << emitted.a << "\nhostB:\n" << emitted.b;
    hosts_yaml_ = emitted.a;
    right_ = dir_.path + "/right.yaml";
    write_file(right_, hosts_yaml_ + "layout: {tp: 1, dp: 2}\n");
    // hostB's /dev/shm far larger than it is; an IMEX channel on hostA.
    std::string wrong = replace_nth(hosts_yaml_, "shm_size: 16MiB", "shm_size: 190GiB", 1);
    wrong = replace_nth(wrong, "imex_channel: false", "imex_channel: true", 0);
    wrong_ = dir_.path + "/wrong.yaml";
    write_file(wrong_, wrong + "layout: {tp: 1, dp: 2}\n");
  }

  TempDir dir_{"/tmp/engramlab-bridge"};
  std::string hosts_yaml_, right_, wrong_;
};

TEST_F(BridgeAcrossTwoHosts, DoctorsGatheredYamlParsesBackAndNamesBothHosts) {
  auto file = parse_deployment_as_written(hosts_yaml_ + "layout: {tp: 1, dp: 2}\n", "gathered");
  ASSERT_TRUE(file.is_ok()) << file.status().to_string() << "\n" << hosts_yaml_;
  ASSERT_EQ(file->deployment.hosts.size(), 2u) << hosts_yaml_;
  EXPECT_EQ(file->deployment.hosts[0].name, "hostA");
  EXPECT_EQ(file->deployment.hosts[1].name, "hostB");
  for (const HostSpec& h : file->deployment.hosts) {
    EXPECT_TRUE(h.shm_mounted) << hosts_yaml_;
    EXPECT_EQ(h.tmpfs_bytes_total, 16u << 20) << hosts_yaml_;  // each host's own tmpfs
    EXPECT_EQ(h.gpu_count, 1) << hosts_yaml_;                  // one rank each, no GPU: said in a comment
  }
  EXPECT_NE(hosts_yaml_.find("no GPU could be read here"), std::string::npos) << hosts_yaml_;
}

TEST_F(BridgeAcrossTwoHosts, DoctorWithTheRightFilePassesAndWithAWrongOneNamesBothValues) {
  const TwoHostRun right = run_two_hosts("plain", on_each_host("doctor --file " + right_));
  EXPECT_EQ(exit_code(right.status), 0) << "hostA:\n" << right.a << "\nhostB:\n" << right.b;
  EXPECT_NE(right.a.find("matches " + right_ + ": every fact it states"), std::string::npos) << right.a;
  EXPECT_EQ(right.a.find("differs from"), std::string::npos) << right.a;

  const TwoHostRun wrong = run_two_hosts("plain", on_each_host("doctor --file " + wrong_));
  EXPECT_NE(exit_code(wrong.status), 0) << "hostA:\n" << wrong.a << "\nhostB:\n" << wrong.b;
  EXPECT_NE(wrong.a.find("differs from " + wrong_ + ": hosts[1] 'hostB' shm_size: the file says 190.0 GiB, "),
            std::string::npos)
      << wrong.a;
  EXPECT_NE(wrong.a.find("/shm here is 16 MiB"), std::string::npos) << wrong.a;
  EXPECT_NE(wrong.a.find("differs from " + wrong_ +
                         ": hosts[0] 'hostA' imex_channel: the file says true, this host has no IMEX channel"),
            std::string::npos)
      << wrong.a;
  // Both ranks fail alike.
  EXPECT_NE(wrong.a.find("is not the one " + wrong_ + " describes: 2 differences"), std::string::npos) << wrong.a;
  EXPECT_NE(wrong.b.find("is not the one " + wrong_ + " describes: 2 differences"), std::string::npos) << wrong.b;
}

TEST_F(BridgeAcrossTwoHosts, AcceptanceComparesBeforeItNeedsAGpuAndEveryRankFails) {
  const TwoHostRun wrong =
      run_two_hosts("plain", on_each_host("acceptance --table-model tiny --tokens 1 --file " + wrong_));
  EXPECT_NE(exit_code(wrong.status), 0) << "hostA:\n" << wrong.a << "\nhostB:\n" << wrong.b;
  EXPECT_NE(wrong.b.find("rank 1: differs from " + wrong_ + ": hosts[1] 'hostB' shm_size: the file says 190.0 GiB, "),
            std::string::npos)
      << wrong.b;
  EXPECT_NE(wrong.b.find("/shm here is 16 MiB"), std::string::npos) << wrong.b;
  EXPECT_NE(wrong.a.find("rank 0: differs from " + wrong_ + ": hosts[0] 'hostA' imex_channel: the file says true"),
            std::string::npos)
      << wrong.a;
  // Each rank learns whose facts differ before any table is built.
  for (const std::string* side : {&wrong.a, &wrong.b}) {
    EXPECT_NE(side->find("rank 0 (1 difference), rank 1 (1 difference); each rank printed its own differences, and "
                         "no table was built"),
              std::string::npos)
        << *side;
  }

  // With the right file the comparison passes and the rank goes on to need its GPU.
  const TwoHostRun right =
      run_two_hosts("plain", on_each_host("acceptance --table-model tiny --tokens 1 --file " + right_));
  for (const std::string* side : {&right.a, &right.b}) {
    EXPECT_NE(side->find(": matches " + right_ + ": hosts["), std::string::npos) << *side;
    EXPECT_NE(side->find("the acceptance test looks up on this rank's GPU, but the rank has none"), std::string::npos)
        << *side;
  }
}

}  // namespace
}  // namespace engram::testing
