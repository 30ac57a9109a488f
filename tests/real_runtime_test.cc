// The host placements on REAL processes (engramlab launch, TCP collectives,
// /dev/shm, fd channel) with the runtime and lookup code the emulator runs,
// and `engramlab scenario run --real` giving the same placement, warnings and
// lookup bytes as the emulator on the same file. Real ranks see the real
// machine's facts, so each test creates the scenario's conditions for real:
// a private mount namespace with a tmpfs of the scenario's size on /dev/shm
// and a UTS namespace with the scenario's hostname (warnings name the host
// and are compared by key and text). Without permission for namespaces the
// tests that need them skip, saying so.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backends/ipc/job_token.h"
#include "backends/shm/posix_shared_memory.h"
#include "core/placements/host_shared.h"
#include "harness/scenario_rank_record.h"
#include "tests/process_run.h"
#include "tests/temp_dir.h"
#include "tests/tp_matrix_cases.h"
#include "tests/private_tmpfs.h"
#include "tests/golden_messages.h"

namespace {

using ::engram::testing::golden_message;

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace engram;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
const std::string kWorker = std::string(ENGRAM_BINARY_DIR) + "/tests/host_worker";
const std::string kScenarios = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";

using engram::testing::ProcessRun;
using engram::testing::count;
using engram::testing::run;

// `script` runs in a new mount + UTS namespace with a tmpfs of `tmpfs_size`
// on /dev/shm and `hostname` set. Empty optional: namespaces not permitted.
std::optional<ProcessRun> in_namespace(const std::string& tmpfs_size, const std::string& hostname,
                                       const std::string& script) {
  if (!engram::testing::why_no_private_tmpfs().empty()) return std::nullopt;
  return run("unshare --mount --uts --propagation private sh -c 'mount -t tmpfs -o size=" + tmpfs_size +
             " tmpfs /dev/shm && hostname " + hostname + " && " + script + "'");
}

#define SKIP_WITHOUT_NAMESPACES(result)                                                                          \
  if (!(result)) GTEST_SKIP() << "SKIPPED: needs mount+UTS namespaces: " << engram::testing::why_no_private_tmpfs()

std::string real_run(const std::string& files) { return kEngramlab + " scenario run --real " + files; }

const std::string kToken = "realruntimetest-token-0123456789";
// The segment of `layer` that a job under kToken names (TP1).
std::string segment_of(const std::string& job, int layer) {
  return host_table_segment_name(job, ipc::shm_name_part(kToken, job), layer);
}

TEST(RealRuntime, FourRanksShareOneShmTableWithTheEmulatorsBytes) {
  auto r = in_namespace("190g", "gb200-0", real_run(kScenarios + "/dep4_shared.yaml"));
  SKIP_WITHOUT_NAMESPACES(r);
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_NE(r->output.find("/dev/shm 190.0 GiB; the scenario's host gb200-0, /dev/shm 190.0 GiB"), std::string::npos)
      << r->output;
  // rank, real, emulator, hashes, same: four host_shared ranks equal to the emulator.
  EXPECT_EQ(count(r->output, "host_shared        host_shared"), 4u) << r->output;
  EXPECT_EQ(count(r->output, "    yes\n"), 4u) << r->output;
  EXPECT_NE(r->output.find("warnings: real 0, emulator 0: same"), std::string::npos) << r->output;
  EXPECT_NE(r->output.find("1 passed, 0 skipped, 0 failed"), std::string::npos) << r->output;
  EXPECT_LT(r->took, 30s);
}

TEST(RealRuntime, A64MiBTmpfsFallsBackWithTheWarningAndExplicitTrueFailsWithTheSizes) {
  auto r = in_namespace("64m", "gb200-0",
                        real_run(kScenarios + "/dep4_docker_default_shm.yaml " + kScenarios +
                                 "/real/dep4_explicit_true_64mib.yaml"));
  SKIP_WITHOUT_NAMESPACES(r);
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_EQ(count(r->output, "host_head_sharded  host_head_sharded"), 4u) << r->output;
  // The expectations demand a warning naming 188.8 GiB, 64 MiB, --shm-size and
  // --ipc=host; it must also be the emulator's, word for word.
  EXPECT_NE(r->output.find("warnings: real 1, emulator 1: same"), std::string::npos) << r->output;
  EXPECT_NE(r->output.find("error: real failed_precondition, emulator failed_precondition: same"), std::string::npos)
      << r->output;
  EXPECT_NE(r->output.find("188.8 GiB needed, 64 MiB available"), std::string::npos) << r->output;
  EXPECT_NE(r->output.find("2 passed, 0 skipped, 0 failed"), std::string::npos) << r->output;
}

TEST(RealRuntime, HostPrivateEqualsTheEmulatorsBytes) {
  auto r = in_namespace("190g", "h200-0", real_run(kScenarios + "/dp1_resolves_disabled.yaml"));
  SKIP_WITHOUT_NAMESPACES(r);
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_EQ(count(r->output, "host_private       host_private"), 4u) << r->output;
  EXPECT_NE(r->output.find("1 passed, 0 skipped, 0 failed"), std::string::npos) << r->output;
}

// Ids across steps and CP ranks on real processes: the CP groups trade their
// halos over TCP, each replica's ranks run a request hasher through chunks,
// decode, verify/commit and a handover; ids equal the accepted sequence
// hashed whole (the files' ids_equal_whole), lookups the emulator's.
TEST(RealRuntime, StepsAndCpHalosOnRealProcessesEqualTheWholeSequenceAndTheEmulator) {
  auto r = in_namespace("190g", "h200-0",
                        real_run(kScenarios + "/cp2_every_offset.yaml " + kScenarios +
                                 "/steps_decode_verify_handover.yaml"));
  SKIP_WITHOUT_NAMESPACES(r);
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_EQ(count(r->output, "host_private       host_private"), 4u) << r->output;
  EXPECT_EQ(count(r->output, "host_shared        host_shared"), 4u) << r->output;
  EXPECT_NE(r->output.find("2 passed, 0 skipped, 0 failed"), std::string::npos) << r->output;
}

// vLLM's Engram test matrix (tests/tp_matrix_cases.h) on real processes: 18
// scenarios, each rank's bytes equal to the direct lookup (its token shard
// under sequence parallelism) and to the emulator's, rank by rank.
TEST(RealRuntime, VllmTpMatrixOnRealProcessesEqualsTheDirectLookupAndTheEmulator) {
  char templ[] = "/tmp/engramlab-tpmatrix-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  std::map<std::string, std::string> files_by_tmpfs;  // "190GiB" -> paths
  size_t cases = 0;
  for (const engram::testing::TpMatrixCase& c : engram::testing::tp_matrix_cases()) {
    const std::string path = dir + "/" + c.name() + ".yaml";
    std::ofstream(path) << c.scenario_text();
    files_by_tmpfs[c.tmpfs] += " " + path;
    ++cases;
  }
  size_t passed = 0;
  bool ran = false;
  for (const auto& [tmpfs, files] : files_by_tmpfs) {
    auto r = in_namespace(tmpfs == "190GiB" ? "190g" : "64m", "h200-0", real_run(files));
    if (!r) break;
    ran = true;
    EXPECT_EQ(r->exit_code, 0) << r->output;
    const size_t here = static_cast<size_t>(std::count(files.begin(), files.end(), ' '));
    EXPECT_NE(r->output.find(fmt::format("{} passed, 0 skipped, 0 failed", here)), std::string::npos) << r->output;
    EXPECT_EQ(count(r->output, "DIFFERENT"), 0u) << r->output;
    passed += here;
  }
  fs::remove_all(dir);
  SKIP_WITHOUT_NAMESPACES(ran);
  EXPECT_EQ(passed, cases);
}

TEST(RealRuntime, TheComparisonCatchesADifferentMachine) {
  // The same file on a machine whose /dev/shm is too small: real ranks fall
  // back, the emulator (190 GiB in the file) does not, and the run says so.
  auto r = in_namespace("64m", "gb200-0", real_run("--here " + kScenarios + "/dep4_shared.yaml"));
  SKIP_WITHOUT_NAMESPACES(r);
  EXPECT_EQ(r->exit_code, 1) << r->output;
  EXPECT_NE(r->output.find("real vs emulator: placement host_head_sharded vs host_shared"), std::string::npos)
      << r->output;
  EXPECT_NE(r->output.find("warnings: real 1, emulator 0: DIFFERENT"), std::string::npos) << r->output;
}

TEST(RealRuntime, WithoutHereAnotherMachineIsSkippedWithTheLineThatReproducesIt) {
  auto r = in_namespace("64m", "not-gb200", real_run(kScenarios + "/dep4_shared.yaml"));
  SKIP_WITHOUT_NAMESPACES(r);
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_NE(r->output.find("skipped: this host is not the scenario's (hostname not-gb200 vs gb200-0; /dev/shm 64 MiB "
                           "vs 190.0 GiB)"),
            std::string::npos)
      << r->output;
  EXPECT_NE(r->output.find("unshare --mount --uts --propagation private sh -c 'mount -t tmpfs -o size=199229440k "
                           "tmpfs /dev/shm && hostname gb200-0 && " +
                           kEngramlab + " scenario run --real " + kScenarios + "/dep4_shared.yaml'"),
            std::string::npos)
      << r->output;
  EXPECT_NE(r->output.find("0 passed, 1 skipped, 0 failed"), std::string::npos) << r->output;
  EXPECT_EQ(r->output.find("launcher exit"), std::string::npos) << "nothing may have been launched:\n" << r->output;
}

// This host is the scenario's where its /dev/shm is within 1% of the file's
// (a tmpfs rounds its size to pages; doctor --file allows the same), and not
// at 2% (issue 48: the runner demanded an exact match).
TEST(RealRuntime, AShmWithinOnePercentOfTheScenariosIsThisHostAndTwoPercentIsNot) {
  auto near = in_namespace("191g", "gb200-0", real_run(kScenarios + "/dep4_shared.yaml"));
  SKIP_WITHOUT_NAMESPACES(near);
  EXPECT_EQ(near->exit_code, 0) << near->output;
  EXPECT_EQ(near->output.find("skipped: this host is not"), std::string::npos) << near->output;
  EXPECT_NE(near->output.find("1 passed, 0 skipped, 0 failed"), std::string::npos) << near->output;
  auto far = in_namespace("194g", "gb200-0", real_run(kScenarios + "/dep4_shared.yaml"));
  SKIP_WITHOUT_NAMESPACES(far);
  EXPECT_EQ(far->exit_code, 0) << far->output;
  EXPECT_NE(far->output.find("skipped: this host is not the scenario's (/dev/shm 194.0 GiB vs 190.0 GiB)"),
            std::string::npos)
      << far->output;
}

TEST(RealRuntime, GpuPlacementsAndMultiHostAreSkippedWithHowToRunThem) {
  const ProcessRun r = run(real_run(kScenarios + "/b300_one_host_posix.yaml " + kScenarios +
                                    "/spanning_hosts_no_fabric.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped: needs GPUs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("skipped: the topology has 2 hosts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(kEngramlab + " launch --nnodes 2 --node-rank i --master-addr h200-a --nproc-per-node 4 -- " +
                          kEngramlab + " scenario rank " + kScenarios +
                          "/spanning_hosts_no_fabric.yaml --result-dir DIR"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("0 passed, 2 skipped, 0 failed"), std::string::npos) << r.output;
}

// Crash tests: ranks run `scenario rank` directly under `engramlab launch`,
// one of them SIGKILLs itself mid-load, and every rank's record is read.
class RealCrash : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/engramlab-realcrash-XXXXXX";
    dir_ = ::mkdtemp(templ);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Launch under kToken (so the test knows the segment names), then list
  // what is left in /dev/shm, in the same namespace.
  std::string launch_script(const std::string& job, const std::string& rank_args) const {
    return "ENGRAMLAB_JOB_TOKEN=" + kToken + " ENGRAMLAB_OP_TIMEOUT_MS=5000 " + kEngramlab + " launch -n 4 --job-id " +
           job + " --grace-ms 5000 -- " +
           kEngramlab + " scenario rank " + kScenarios + "/dep4_shared.yaml --result-dir " + dir_ + " " + rank_args +
           "; echo LAUNCH_EXIT=$?; echo LEFT: $(ls /dev/shm)";
  }
  std::optional<harness::ScenarioRankRecord> record(int rank) const {
    std::ifstream in(dir_ + "/rank-" + std::to_string(rank) + ".json");
    std::string line;
    if (!std::getline(in, line)) return std::nullopt;
    auto parsed = harness::parse_rank_record(line, "rank record");
    EXPECT_TRUE(parsed.is_ok()) << parsed.status().to_string();
    if (!parsed.is_ok()) return std::nullopt;
    return std::move(parsed).value();
  }
  std::string dir_;
};

TEST_F(RealCrash, KilledWriterMidLoadStopsTheOthersNamingItAndNothingIsLeft) {
  // Rank 0 writes the node's segments; it dies at its second create, after
  // creating and filling the first table.
  auto r = in_namespace("190g", "gb200-0", launch_script("crashw", "--die-rank 0 --die-at shm_create:2"));
  SKIP_WITHOUT_NAMESPACES(r);
  EXPECT_NE(r->output.find("SIGKILL at shm_create #2 (" + segment_of("crashw", 14) + ")"), std::string::npos)
      << r->output;
  EXPECT_NE(r->output.find("rank 0 (pid"), std::string::npos) << r->output;
  EXPECT_NE(r->output.find(golden_message("process.killed_by_sigkill")), std::string::npos) << r->output;
  EXPECT_EQ(record(0), std::nullopt) << "a SIGKILLed rank writes nothing";
  for (int rank = 1; rank < 4; ++rank) {
    auto rec = record(rank);
    ASSERT_TRUE(rec.has_value()) << "rank " << rank << "\n" << r->output;
    EXPECT_EQ(rec->status.code(), ErrorCode::kUnavailable) << rec->status.to_string();
    EXPECT_EQ(rec->status.context().peer, 0) << "names the dead rank: " << rec->status.to_string();
    EXPECT_FALSE(rec->result.started);
  }
  EXPECT_NE(r->output.find("LEFT:\n"), std::string::npos)
      << "the survivors unlink the dead writer's segment (names are job-unique)\n" << r->output;
  EXPECT_LT(r->took, 15s) << r->output;
}

TEST_F(RealCrash, KilledReaderMidLoadIsNamedAndTheWriterReleasesItsSegments) {
  auto r = in_namespace("190g", "gb200-0", launch_script("crashr", "--die-rank 2 --die-at shm_open:2"));
  SKIP_WITHOUT_NAMESPACES(r);
  EXPECT_NE(r->output.find("SIGKILL at shm_open #2"), std::string::npos) << r->output;
  EXPECT_NE(r->output.find("rank 2 (pid"), std::string::npos) << r->output;
  EXPECT_EQ(record(2), std::nullopt);
  for (int rank : {0, 1, 3}) {
    auto rec = record(rank);
    ASSERT_TRUE(rec.has_value()) << "rank " << rank << "\n" << r->output;
    EXPECT_EQ(rec->status.code(), ErrorCode::kUnavailable) << rec->status.to_string();
    EXPECT_EQ(rec->status.context().peer, 2) << rec->status.to_string();
  }
  EXPECT_NE(r->output.find("LEFT:\n"), std::string::npos) << r->output;
  EXPECT_LT(r->took, 15s) << r->output;
}

// Another user of the host creates, before the job starts, every name the job
// could be predicted to use from its id: the form before names carried a
// part (engramlab-<job>-layer<L>) and the emulator's fixed part. The job's
// names carry its token's part, so it runs past them (issue 50, item 10).
TEST_F(RealCrash, SegmentNamesAnotherUserMadeFromTheJobIdDoNotStopTheJob) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make files of another uid";
  const std::vector<std::string> theirs = {"engramlab-squat-layer1", "engramlab-squat-layer14",
                                          host_table_segment_name("squat", kFixedShmNamePart, 1),
                                          host_table_segment_name("squat", kFixedShmNamePart, 14)};
  std::string squat;
  for (const std::string& name : theirs)
    squat += "touch /dev/shm/" + name + " && chown 65534:65534 /dev/shm/" + name + " && ";
  auto r = in_namespace("190g", "gb200-0", squat + launch_script("squat", ""));
  SKIP_WITHOUT_NAMESPACES(r);
  EXPECT_NE(r->output.find("LAUNCH_EXIT=0"), std::string::npos) << r->output;
  for (int rank = 0; rank < 4; ++rank) {
    auto rec = record(rank);
    ASSERT_TRUE(rec.has_value()) << "rank " << rank << "\n" << r->output;
    EXPECT_TRUE(rec->status.is_ok()) << rec->status.to_string();
    EXPECT_EQ(rec->result.placement, Placement::kHostShared);
  }
  const size_t left_at = r->output.find("LEFT: ");
  ASSERT_NE(left_at, std::string::npos) << r->output;
  const std::string left = r->output.substr(left_at, r->output.find('\n', left_at) - left_at);
  EXPECT_EQ(count(left, "engramlab-"), theirs.size()) << "only the other user's files stay: " << left;
  for (const std::string& name : theirs) EXPECT_NE(left.find(name), std::string::npos) << left;
}

// A writer that crashed with no survivor leaves its segment; the next start
// of that job finds it, says so and removes it, but never touches a segment
// whose creator still runs. No namespace needed: the shm dir is private. The
// leftovers are of a run under kToken; this start draws another token, and
// finds them by the job id.
TEST(RealStaleSegments, NextStartRemovesADeadWritersSegmentButNotALiveOnes) {
  const engram::testing::TempDir made_shm("/dev/shm/engramlab-realstale");
  const engram::testing::TempDir made_results("/tmp/engramlab-realstale-res");
  const std::string& shm_dir = made_shm.path;
  const std::string& result_dir = made_results.path;
  shm::PosixSharedMemory memory({.root_dir = shm_dir});

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto created = memory.create(segment_of("stalejob", 14), 1 << 16);
    if (created.is_ok()) ::raise(SIGKILL);  // a writer dying mid-load, with its mapping
    ::_exit(3);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child could not create its segment";
  auto alive = memory.create(segment_of("stalejob", 1), 1 << 16);  // this process: alive
  ASSERT_TRUE(alive.is_ok()) << alive.status().to_string();

  const ProcessRun r = run("ENGRAMLAB_SHM_DIR=" + shm_dir + " ENGRAMLAB_OP_TIMEOUT_MS=5000 " + kEngramlab +
                           " launch -n 4 --job-id stalejob -- " + kEngramlab + " scenario rank " + kScenarios +
                           "/dep4_docker_default_shm.yaml --result-dir " + result_dir);
  EXPECT_TRUE(fs::exists(shm_dir + "/" + segment_of("stalejob", 1))) << "a live creator's segment is never removed";
  EXPECT_FALSE(fs::exists(shm_dir + "/" + segment_of("stalejob", 14))) << r.output;
  std::ifstream in(result_dir + "/rank-0.json");
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << r.output;
  auto rec = harness::parse_rank_record(line, "rank 0");
  ASSERT_TRUE(rec.is_ok()) << rec.status().to_string();
  bool said_so = false;
  for (const Warning& w : rec->warnings)
    said_so |= w.key == "shm.stale_segment_removed:" + segment_of("stalejob", 14) &&
               w.text.find("creator pid " + std::to_string(child)) != std::string::npos &&
               w.text.find("stale: creator gone") != std::string::npos;
  EXPECT_TRUE(said_so) << line;
  alive.value().reset();
  memory.unlink(segment_of("stalejob", 1)).ignore();
}

}  // namespace
