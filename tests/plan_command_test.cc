// Runs the built `engramlab plan` and checks exit codes and the words users read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/engramlab_command.h"

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct CommandRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandRun run_plan(const std::string& args) {
  // Unique per test and call: ctest runs these tests in parallel processes.
  static int calls = 0;
  const std::string err_path = ::testing::TempDir() + "plan_command_test." +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name() + "." +
                               std::to_string(getpid()) + "." + std::to_string(calls++) + ".err";
  const std::string cmd = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab plan " + args + " 2>" + err_path;
  CommandRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (!pipe) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  return r;
}

const std::string kDep4 = "--model deepseek-v4.1-flash --hosts 1 --gpus-per-host 4 --gpu-model GB200 --tp 1 --dp 4 "
                          "--cpu-offload";

// A scenario file is a deployment with faults and expectations: plan plans
// its deployment, saying so, as `fuzz --file` takes either kind; a file that
// is neither still gets its unknown-field errors, the known fields said once.
TEST(PlanCommand, AScenarioFilePlansItsDeploymentAndUnknownFieldsNameTheKnownOnesOnce) {
  const std::string scenario = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/fault_send.yaml";
  const CommandRun r = run_plan("--file " + scenario);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("fault_send.yaml is a scenario file: its deployment is planned here"));
  EXPECT_THAT(r.out, HasSubstr("placement:"));
  EXPECT_THAT(r.err, Not(HasSubstr("unknown field")));

  const std::string bad = ::testing::TempDir() + "plan_command_test.unknown." + std::to_string(getpid()) + ".yaml";
  std::ofstream(bad) << "hosts: [{name: a, gpus: 2}]\nlayout: {tp: 1, dp: 2}\ndescription: x\nseed: 3\nfoo: 1\n";
  const CommandRun unknown = run_plan("--file " + bad);
  std::remove(bad.c_str());
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_THAT(unknown.err, AllOf(HasSubstr("description: unknown field 'description'; [fix 1] known fields here: "
                                           "model, hosts, rank_hosts, layout, config, engine, timeouts\n"),
                                 HasSubstr("seed: unknown field 'seed'; (fix 1 above)\n"),
                                 HasSubstr("foo: unknown field 'foo'; (fix 1 above)\n")));
  const std::string known = "known fields here: model";
  EXPECT_EQ(unknown.err.find(known), unknown.err.rfind(known)) << "said once: " << unknown.err;
}

TEST(PlanCommand, Dep4WithBigShmSharesOneCopy) {
  CommandRun r = run_plan(kDep4 + " --shm-size 190GiB");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("dp_shared_memory unset -> true (enabled)"), HasSubstr("ranks 0-3: host_shared"),
                           HasSubstr("warnings: none"), HasSubstr("202,758,032,400 B"), Not(HasSubstr("rule")),
                           HasSubstr("memory per host"), HasSubstr("KV cache left")));
  EXPECT_THAT(r.out, Not(HasSubstr("host_head_sharded")));
}

TEST(PlanCommand, Dep4WithDockerShmFallsBackAndWarnsOnce) {
  CommandRun r = run_plan(kDep4 + " --shm-size 64MiB");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("ranks 0-3: host_head_sharded"), HasSubstr("188.8 GiB"), HasSubstr("--shm-size"),
                           HasSubstr("--ipc=host"), HasSubstr("emptyDir"), HasSubstr("dp_shared_memory: false"),
                           Not(HasSubstr("rule"))));
  // One warning, not one per layer.
  const std::string key = "[dp_shared_memory.fallback.shm_too_small]";
  size_t first = r.out.find(key);
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(r.out.find(key, first + 1), std::string::npos);
}

TEST(PlanCommand, JsonIsMachineReadable) {
  CommandRun r = run_plan(kDep4 + " --shm-size 190GiB --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("\"dp_shared_memory\":{\"enabled\":true"),
                           HasSubstr("\"placement\":\"host_shared\""), HasSubstr("\"table_bytes_total\":202758032400"),
                           HasSubstr("\"shm_bytes\":202758032400")));
  EXPECT_EQ(r.out.front(), '{');
}

TEST(PlanCommand, StrictFailureExitsOne) {
  CommandRun r = run_plan(kDep4 + " --shm-size 64MiB --dp-shared-memory true");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("failed_precondition"), HasSubstr("188.8 GiB needed, 64 MiB available"),
                           HasSubstr("--shm-size"), HasSubstr("--ipc=host")));
}

TEST(PlanCommand, BadInputExitsTwo) {
  CommandRun size = run_plan(kDep4 + " --shm-size lots");
  EXPECT_EQ(size.exit_code, 2);
  EXPECT_THAT(size.err, AllOf(HasSubstr("--shm-size"), HasSubstr("'lots'")));
  CommandRun negative = run_plan(kDep4 + " --shm-size -1GiB");
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_THAT(negative.err, HasSubstr("negative"));
  CommandRun tri = run_plan(kDep4 + " --dp-shared-memory maybe");
  EXPECT_EQ(tri.exit_code, 2);
  EXPECT_THAT(tri.err, HasSubstr("true, false or unset"));
  CommandRun mismatch = run_plan("--hosts 1 --gpus-per-host 4 --tp 2 --dp 4");
  EXPECT_EQ(mismatch.exit_code, 2);
  EXPECT_THAT(mismatch.err, HasSubstr("tp * dp = 2 * 4 = 8 ranks, but the hosts give 4"));
  CommandRun tp = run_plan("--tp zero");
  EXPECT_EQ(tp.exit_code, 2);
  EXPECT_THAT(tp.err, HasSubstr("--tp"));
  CommandRun unknown = run_plan(kDep4 + " --shm-sise 64MiB");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("--shm-sise"));
  CommandRun help = run_plan("--help");
  EXPECT_EQ(help.exit_code, 0);
}

TEST(PlanCommand, FileWithFlagOverrides) {
  const std::string file = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/deployments/dep4_gb200_docker_default.yaml";
  CommandRun from_file = run_plan("--file " + file);
  EXPECT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_THAT(from_file.out, HasSubstr("host_head_sharded"));
  CommandRun overridden = run_plan("--file " + file + " --shm-size 190GiB");
  EXPECT_EQ(overridden.exit_code, 0) << overridden.err;
  EXPECT_THAT(overridden.out, AllOf(HasSubstr("ranks 0-3: host_shared"), HasSubstr("gb200-0")));
  CommandRun no_offload = run_plan("--file " + file + " --cpu-offload=false");
  EXPECT_EQ(no_offload.exit_code, 0) << no_offload.err;
  EXPECT_THAT(no_offload.out, HasSubstr("device_collective"));

  const std::string bad = ::testing::TempDir() + "plan_command_bad." + std::to_string(getpid()) + ".yaml";
  std::ofstream(bad) << "hosts:\n  - {name: a, gpus: 4, shm_sise: 1GiB}\n";
  CommandRun typo = run_plan("--file " + bad);
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err, AllOf(HasSubstr("line 2, column 24"), HasSubstr("hosts[0].shm_sise"), HasSubstr("shm_size")));
  EXPECT_EQ(std::remove(bad.c_str()), 0) << "the suite leaves nothing in " << ::testing::TempDir();
}

TEST(PlanCommand, PeerShardsShowHandleTypeAndHbm) {
  CommandRun r = run_plan("--hosts 1 --gpus-per-host 8 --tp 8 --peer-shards --cpu-offload");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("ranks 0-7: device_peer"), HasSubstr("handle type posix_fd"),
                           HasSubstr("[peer_shards.precedence]"), HasSubstr("23.605 GiB"), HasSubstr("102.214 GiB")));
  CommandRun across = run_plan("--hosts 2 --tp 8 --dp 2 --peer-shards");
  EXPECT_EQ(across.exit_code, 1);
  EXPECT_THAT(across.err, AllOf(HasSubstr("IMEX channel"), HasSubstr("node-0"), HasSubstr("node-1")));
}

}  // namespace

namespace {

TEST(PlanCommand, NoArgumentsSaysWhatIsWrongAndExitsNonZero) {
  // One H200 holding both tables (188.8 GiB) on its 139.8 GiB.
  CommandRun r = run_plan("");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("resource_exhausted"), HasSubstr("the deployment cannot run"),
                           HasSubstr("device_collective"), HasSubstr("more than the whole GPU's 139.8 GiB"),
                           HasSubstr("cpu_offload: true")));
  // The report is there, with what it assumed, and KV cache left negative named as a warning.
  EXPECT_THAT(r.out, AllOf(HasSubstr("1 rank on 1 host"), HasSubstr("defaults used"),
                           HasSubstr("gpu_memory (1 host of H200): 139.800 GiB per GPU"),
                           HasSubstr("CUDA total 139.80 GiB"), HasSubstr("engine.gpu_memory_fraction: 0.90"),
                           HasSubstr("--shm-size: 64 MiB"), HasSubstr("[memory.hbm_exceeded]"),
                           HasSubstr("Change one of")));
}

TEST(PlanCommand, Tp8WithOffloadOnOneH200BoxHoldsOneTableInSlices) {
  // dp 1: sharing resolves off; the replica's 8 TP ranks hold a slice each:
  // 3 of the 24 heads, 23.6 GiB per rank, one table on the host.
  CommandRun r = run_plan("--tp 8 --cpu-offload");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("host_private"), HasSubstr("each TP rank holds a slice of 3 of the 24 heads"),
                           HasSubstr("23.604 GiB"), HasSubstr("host_memory (1 host of H200)"),
                           HasSubstr("1862.645 GiB"), HasSubstr("warnings: none")));
}

TEST(PlanCommand, Dp8PrivateCopiesShowHostMemory) {
  // dp_shared_memory false: each of the 8 replicas keeps a host copy.
  CommandRun r = run_plan("--dp 8 --cpu-offload --dp-shared-memory false");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("host_private"), HasSubstr("[memory.host_tables_near_ram]"), HasSubstr("8 table copies"),
                           HasSubstr("host_memory (1 host of H200)"), HasSubstr("1862.645 GiB")));
  // On a host with 1 TiB of RAM it cannot run: the error names the placement and the fix.
  CommandRun small = run_plan("--dp 8 --cpu-offload --dp-shared-memory false --host-memory 1TiB");
  EXPECT_EQ(small.exit_code, 1) << small.out;
  EXPECT_THAT(small.err, AllOf(HasSubstr("host(s) node-0 (host_private)"), HasSubstr("more than the host's 1024.0 GiB"),
                               HasSubstr("dp_shared_memory"), HasSubstr("cpu_offload: false")));
}

TEST(PlanCommand, TpSlicesGiveTheEnginesPerRankFiguresAndOneTablePerNode) {
  // vLLM's TP4 split: 47.2 GiB per rank, one table per node, whether one
  // replica keeps it private or two share it head-sharded over TP2 x DP2.
  CommandRun tp4 = run_plan("--cpu-offload --tp 4 --dp 1 --gpus-per-host 4 --shm-size 190GiB");
  EXPECT_EQ(tp4.exit_code, 0) << tp4.err;
  EXPECT_THAT(tp4.out, AllOf(HasSubstr("ranks 0-3: host_private"), HasSubstr("47.209 GiB"),
                             HasSubstr("188.833 GiB       1")));
  CommandRun tp2dp2 = run_plan("--cpu-offload --tp 2 --dp 2 --gpus-per-host 4 --shm-size 64MiB");
  EXPECT_EQ(tp2dp2.exit_code, 0) << tp2dp2.err;
  EXPECT_THAT(tp2dp2.out, AllOf(HasSubstr("ranks 0-3: host_head_sharded, 2 groups of 2"),
                                HasSubstr("4 TP-major shards of 6"), HasSubstr("47.209 GiB"),
                                HasSubstr("188.833 GiB       1")));
  CommandRun json = run_plan("--cpu-offload --tp 2 --dp 2 --gpus-per-host 4 --shm-size 64MiB --json");
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, AllOf(HasSubstr("\"table_copies\":1"), HasSubstr("\"sequence_parallel\":false")));
  // Sequence parallelism exists only above TP1.
  CommandRun sp = run_plan("--cpu-offload --tp 1 --dp 4 --gpus-per-host 4 --sequence-parallel");
  EXPECT_EQ(sp.exit_code, 2) << sp.out << sp.err;
  EXPECT_THAT(sp.err, AllOf(HasSubstr("invalid_argument"), HasSubstr("config.sequence_parallel: true needs tp > 1"),
                            HasSubstr("raise tp")));
}

// Container limits as flags, for every host: a limit below what the ranks
// will hold is refused (exit 1) naming the limit and the number to set, in
// the host's environment's words; a limit that holds them plans.
TEST(PlanCommand, ContainerLimitFlagsRefuseNamingTheNumberToSet) {
  const CommandRun one = run_plan("--gpus-per-host 1 --tp 1 --dp 1 --cpu-offload --memory-limit-per-rank 1GiB "
                                  "--environment docker");
  EXPECT_EQ(one.exit_code, 1) << one.err;
  EXPECT_THAT(one.err, AllOf(HasSubstr("rank 0 on host node-0 (host_private) runs under a memory limit of 1.0 GiB"),
                             HasSubstr("--memory-limit-per-rank 197GiB"), HasSubstr("docker run --memory=197g"),
                             Not(HasSubstr("Kubernetes"))));
  const std::string pod = "--gpus-per-host 4 --tp 1 --dp 4 --cpu-offload --dp-shared-memory false --host-memory 2TiB ";
  const CommandRun shared = run_plan(pod + "--memory-limit 400GiB");
  EXPECT_EQ(shared.exit_code, 1) << shared.err;
  EXPECT_THAT(shared.err, AllOf(HasSubstr("ranks 0-3 on host node-0 (host_private) share a memory limit of 400.0 GiB"),
                                HasSubstr("--memory-limit 788GiB")));
  EXPECT_EQ(run_plan(pod + "--memory-limit 756GiB").exit_code, 0);
  const CommandRun size_limit = run_plan(kDep4 + " --shm-size 1TiB --shm-size-limit 100Gi");
  EXPECT_EQ(size_limit.exit_code, 1) << size_limit.err;
  EXPECT_THAT(size_limit.err, AllOf(HasSubstr("more than the 100.0 GiB its tmpfs lets be written"),
                                    HasSubstr("sizeLimit: 190Gi")));
  // A Kubernetes quantity: 203G is 203 x 10^9 bytes, enough for 188.8 GiB (202.8 x 10^9).
  EXPECT_EQ(run_plan(kDep4 + " --shm-size 1TiB --shm-size-limit 203G").exit_code, 0);
  EXPECT_EQ(run_plan(kDep4 + " --shm-size 1TiB --shm-size-limit 202G").exit_code, 1);
  EXPECT_EQ(run_plan(pod + "--memory-limit 400").exit_code, 2);  // no unit
}

TEST(PlanCommand, KvCacheLeftCountsTheEngineShareAndReserve) {
  const std::string peer = "--hosts 1 --gpus-per-host 8 --tp 8 --peer-shards --gpu-memory 100GiB";
  CommandRun r = run_plan(peer + " --gpu-memory-fraction 0.5 --gpu-reserved 10GiB --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 100 GiB x 0.5 - 23.605 GiB of shards - 10 GiB reserved.
  EXPECT_THAT(r.out, HasSubstr("\"kv_cache_left_bytes\":" +
                               std::to_string(50 * 1073741824ll - 25'346'179'072ll - 10 * 1073741824ll)));
  // Nothing left for the KV cache: an error (exit 1) naming the figures, what to change and how to accept it ...
  CommandRun none = run_plan(peer + " --gpu-reserved 80GiB");
  EXPECT_EQ(none.exit_code, 1) << none.err;
  EXPECT_THAT(none.err, AllOf(HasSubstr("resource_exhausted"), HasSubstr("nothing is left for the KV cache"),
                              HasSubstr("reserved 80.0 GiB"), HasSubstr("a smaller --gpu-reserved"),
                              HasSubstr("engine.allow_negative_kv: true (--allow-negative-kv)")));
  // ... and, accepted, the warning it was (exit 0).
  CommandRun accepted = run_plan(peer + " --gpu-reserved 80GiB --allow-negative-kv");
  EXPECT_EQ(accepted.exit_code, 0) << accepted.err;
  EXPECT_THAT(accepted.out, AllOf(HasSubstr("[memory.hbm_exceeded]"), HasSubstr("reserved 80.0 GiB"),
                                  HasSubstr("a smaller --gpu-reserved")));
  CommandRun bad = run_plan(peer + " --gpu-memory-fraction 1.5");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--gpu-memory-fraction: '1.5' is not a fraction in (0, 1]"));
}

TEST(PlanCommand, SizesNeedAUnitAndModelsAnyCase) {
  CommandRun bare = run_plan(kDep4 + " --gpu-memory 141");
  EXPECT_EQ(bare.exit_code, 2);
  EXPECT_THAT(bare.err, AllOf(HasSubstr("'141' has no unit"), HasSubstr("141GiB"), HasSubstr("141GB")));
  CommandRun lower = run_plan("--cpu-offload --tp 1 --dp 4 --gpu-model gb200 --gpus-per-host 4 --shm-size 189.9GiB");
  EXPECT_EQ(lower.exit_code, 0) << lower.err;
  EXPECT_THAT(lower.out, AllOf(HasSubstr("ranks 0-3: host_shared"), HasSubstr("of GB200")));
}

TEST(PlanCommand, HostsAlikeShareOneRow) {
  const std::string file = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/deployments/nvl72_peer_fabric.yaml";
  CommandRun r = run_plan("--file " + file);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t table = r.out.find("memory per host");
  ASSERT_NE(table, std::string::npos) << r.out;
  const std::string rows = r.out.substr(table, std::min(r.out.find("\nstep time", table), r.out.find("\nmemory verdict", table)) - table);
  EXPECT_THAT(rows, HasSubstr("18 hosts: "));
  EXPECT_LT(std::count(rows.begin(), rows.end(), '\n'), 6) << rows;
}

}  // namespace

namespace {

std::string engramlab_output(const std::string& args) { return engram::testing::run_engramlab(args).text; }

TEST(Cli, VersionAndTheUnitsTable) {
  EXPECT_THAT(engramlab_output("--version"),
              AllOf(HasSubstr("engramlab 0.1.0 ("), HasSubstr(" build; CUDA backend "), HasSubstr("NCCL")));
  // One units table, in the program's help and plan's: binary Ki..Pi and KiB..PiB, decimal KB..PB, and the
  // letters alone as each tool reads them (Kubernetes' G is 10^9).
  for (const char* help : {"--help", "plan --help"})
    EXPECT_THAT(engramlab_output(help),
                AllOf(HasSubstr("Ki Mi Gi Ti Pi     powers of 1024"), HasSubstr("KiB MiB GiB TiB PiB"),
                      HasSubstr("KB MB GB TB PB     powers of 1000"), HasSubstr("190GB = 176.95 GiB"),
                      HasSubstr("189G = 189 x 10^9 and Gi is 2^30"), HasSubstr("rounded to the nearest byte")))
        << help;
  EXPECT_THAT(engramlab_output("scenario --help"), HasSubstr("Run one rank of a scenario on real processes"));
  EXPECT_THAT(engramlab_output("launch --help"),
              AllOf(HasSubstr("--nnodes"), HasSubstr("--node-rank"), HasSubstr("--master-addr"),
                    HasSubstr("--nproc-per-node"), HasSubstr("--no-rank-prefix"),
                    HasSubstr("export ENGRAMLAB_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom")));
}

}  // namespace
