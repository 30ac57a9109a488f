// SGLang's host layouts as placements (core/placements/sglang_*.h), chosen
// by config.placement only: the plan's memory figures, SGLang's host-table
// test (tests/.../test_engram_host_table.py: every row of a table through
// the lookup, here a 2,048-row one, looked up on the CPU with no device
// registration) on the emulator and on real processes, and the PID
// namespace that SGLang's shared layout needs (/proc/<pid>/fd), on the
// emulator and on real processes run in a PID namespace of their own.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/ipc/tcp_collectives.h"
#include "backends/memfd/proc_fd_shared_memory.h"
#include "core/deployment_file/deployment_yaml.h"
#include "core/plan/deployment_plan.h"
#include "core/placements/placement.h"
#include "sim/world.h"
#include "tests/forked_tcp_ranks.h"
#include "tests/lookup_test_support.h"
#include "tests/private_tmpfs.h"
#include "tests/process_run.h"
#include "tests/temp_dir.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// SGLang's test table: 256 FP8 values and 8 UE8M0 scales a row; 2,048 rows
// here, as two heads of 1,024, so 1,024 tokens read every row once.
TableSpec sglang_test_table() {
  TableSpec t;
  t.layer_id = 1;
  t.orders = {2};
  t.heads_per_order = 2;
  t.primes = {1024, 1024};
  t.row_format = RowFormat::kFp8E4M3Ue8m0;
  t.dim = 256;
  return t;
}

// Token t reads row t of head 0 and row 1,024 + t of head 1: every row once.
std::vector<int64_t> every_row_ids(const TableSpec& table) {
  std::vector<int64_t> ids;
  const int64_t tokens = table.primes[0];
  for (int64_t t = 0; t < tokens; ++t) {
    ids.push_back(t);
    ids.push_back(table.head_offset(1) + t);
  }
  return ids;
}

constexpr uint64_t kFillSeed = 41;

// One rank's part: build `placement` over the given groups, look every row
// up on the CPU, compare with the direct rule bitwise. Returns the build's
// or the lookup's status; `equal` and `on_cpu` say what it found.
struct RankResult {
  Status status;
  bool equal = false;
  bool on_cpu = false;  // no device registration: no device lookup, no device bytes
};

RankResult build_and_look_up(Placement placement, RankBackend& backend, Collectives& world, Collectives& tp_group) {
  RankResult r;
  ModelSpec model;
  model.name = "sglang-test";
  model.tables = {sglang_test_table()};
  PlacementContext context{.backend = backend, .group = world, .tp_group = tp_group, .host_group = world,
                           .host_writer_world_rank = 0, .model = model, .fill_seed = kFillSeed, .job_id = "sgl"};
  auto built = placement_ops(placement).build(context);
  if (!built.is_ok()) {
    r.status = built.status();
    return r;
  }
  const TableSpec& table = model.tables[0];
  const std::vector<int64_t> ids = every_row_ids(table);
  std::vector<uint16_t> out(ids.size() * static_cast<size_t>(table.dim), testing::kUnwritten);
  r.status = built.value()->lookup(0, LookupRequest{&table, ids, table.primes[0], out});
  const std::vector<std::byte> bytes = testing::filled_table(table, kFillSeed);
  r.equal = r.status.is_ok() && out == testing::direct_lookup(table, bytes, ids);
  r.on_cpu = !built.value()->device_lookup_ready() && built.value()->footprint().device_bytes == 0;
  const Status released = built.value()->release();
  if (r.status.is_ok()) r.status = released;
  return r;
}

sim::WorldSpec one_host(int gpus, PidNamespaces pid_namespaces) {
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("h200-", 1, gpus, "H200");
  spec.hosts[0].pid_namespaces = pid_namespaces;
  spec.seed = 7;
  return spec;
}

// ------------------------------------------------------------------ config

Result<PlanResult> plan_text(const std::string& text) {
  ENGRAM_ASSIGN_OR_RETURN(Deployment d, parse_deployment_text(text, "test.yaml"));
  WarningSink sink;
  return plan_deployment(d, sink);
}

TEST(ConfigPlacement, AnUnknownNameIsRefusedNamingTheFieldTheValueAndTheKnownNames) {
  auto d = parse_deployment_text(
      "hosts: [{name: h, gpus: 2}]\nlayout: {tp: 2}\nconfig: {cpu_offload: true, placement: sglang_sharde}\n",
      "bad.yaml");
  ASSERT_FALSE(d.is_ok());
  EXPECT_THAT(d.status().message(), AllOf(HasSubstr("config.placement"), HasSubstr("'sglang_sharde'"),
                                          HasSubstr("known: device_collective"), HasSubstr("sglang_shared"),
                                          HasSubstr("leave config.placement out")));
}

TEST(ConfigPlacement, TodaysRulesNeverChooseAnSglangLayout) {
  for (const char* config : {"{}", "{cpu_offload: true}", "{cpu_offload: true, dp_shared_memory: false}",
                             "{cpu_offload: true, dp_shared_memory: true}", "{peer_shards: true}"}) {
    for (const char* layout : {"{tp: 1, dp: 4}", "{tp: 2, dp: 2}", "{tp: 4, dp: 1}"}) {
      auto plan = plan_text(std::string("hosts: [{name: h, gpus: 4, shm_size: 512GiB}]\nlayout: ") + layout +
                            "\nconfig: " + config + "\n");
      // An explicit dp_shared_memory: true at dp 1 is refused by its strict check: no placement to look at.
      if (!plan.is_ok() && plan.status().code() == ErrorCode::kFailedPrecondition) continue;
      ASSERT_TRUE(plan.is_ok()) << config << " " << layout << ": " << plan.status().to_string();
      for (const RankPlan& r : plan->ranks)
        EXPECT_FALSE(std::string(placement_name(r.placement)).starts_with("sglang_")) << config << " " << layout;
    }
  }
}

// ------------------------------------------------------------ sglang_shared

TEST(SglangShared, PlanHoldsOneMemfdCopyPerNodeOutsideDevShm) {
  // Docker's default 64 MiB /dev/shm: the memfd is not bounded by it.
  auto plan = plan_text(
      "hosts: [{name: h, count: 2, gpus: 4, shm_size: 64MiB}]\nlayout: {tp: 2, dp: 4}\n"
      "config: {cpu_offload: true, placement: sglang_shared}\n");
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const uint64_t tables = plan->model.table_bytes_total;
  for (const RankPlan& r : plan->ranks) {
    EXPECT_EQ(r.placement, Placement::kSglangShared);
    EXPECT_EQ(r.memory.host_shared_mapped_bytes, tables);  // every row, whatever the TP rank
    EXPECT_EQ(r.memory.host_private_bytes, 0u);
    EXPECT_EQ(r.memory.hbm_table_bytes, 0u);
  }
  ASSERT_EQ(plan->hosts.size(), 2u);
  for (const HostMemory& h : plan->hosts) {
    EXPECT_EQ(h.table_copies, 1);
    EXPECT_EQ(h.host_table_bytes, tables);
    EXPECT_EQ(h.shared_copy_bytes, tables);
    EXPECT_EQ(h.shm_bytes, 0u);
  }
  EXPECT_TRUE(plan->warnings.empty());
  EXPECT_THAT(plan->reasons.back(), HasSubstr("config.placement: sglang_shared as written"));
}

// Under SGLang's own rules (issue 48): its `shared` memfd belongs to the TP
// group, every rank of the job, so a job across two nodes is refused naming
// them and the fix (the comparison once promised a copy on each node), and
// the same job on one node plans one copy.
TEST(SglangShared, UnderSglangAJobAcrossNodesIsRefusedAndOnOneNodeHoldsOneCopy) {
  auto two = plan_text("hosts: [{name: node, count: 2, gpus: 8}]\nlayout: {tp: 1, dp: 16}\n"
                       "config: {cpu_offload: true}\nengine: {name: sglang}\n");
  ASSERT_FALSE(two.is_ok());
  EXPECT_EQ(two.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(two.status().message(),
              AllOf(HasSubstr("sglang_shared: SGLang's `shared` memfd belongs to its TP group, all 16 ranks"),
                    HasSubstr("made by TP rank 0 on node-0; ranks on node-1 cannot open it"),
                    HasSubstr("host_layout: per_rank")));
  auto per_rank = plan_text("hosts: [{name: node, count: 2, gpus: 8}]\nlayout: {tp: 1, dp: 16}\n"
                            "config: {cpu_offload: true, host_layout: per_rank}\nengine: {name: sglang}\n");
  ASSERT_TRUE(per_rank.is_ok()) << per_rank.status().to_string();
  EXPECT_EQ(per_rank->ranks[0].placement, Placement::kSglangPrivate);
  auto one = plan_text("hosts: [{name: node, gpus: 8}]\nlayout: {tp: 2, dp: 4}\n"
                       "config: {cpu_offload: true}\nengine: {name: sglang}\n");
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  EXPECT_EQ(one->ranks[0].placement, Placement::kSglangShared);
  ASSERT_EQ(one->hosts.size(), 1u);
  EXPECT_EQ(one->hosts[0].table_copies, 1);
}

TEST(SglangShared, EveryRowOfA2048RowTableOnTheEmulatorStaysOnTheCpu) {
  std::vector<RankResult> results(2);
  auto run = sim::run_world(one_host(2, PidNamespaces::kShared), [&](RankBackend& b) -> Status {
    // SGLang's test: two TP ranks of one replica, the same ids on both.
    RankResult& r = results[static_cast<size_t>(b.world_rank)];
    r = build_and_look_up(Placement::kSglangShared, b, *b.world, *b.world);
    return r.status;
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  for (int rank = 0; rank < 2; ++rank) {
    const RankResult& r = results[static_cast<size_t>(rank)];
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_TRUE(r.equal) << "rank " << rank;
    EXPECT_TRUE(r.on_cpu) << "rank " << rank;
  }
}

TEST(SglangShared, RanksInOtherPidNamespacesFailAlikeNamingRanksNamespacesAndTheFix) {
  std::vector<Status> statuses(3);
  auto run = sim::run_world(one_host(3, PidNamespaces::kPerRank), [&](RankBackend& b) -> Status {
    const RankResult r = build_and_look_up(Placement::kSglangShared, b, *b.world, *b.world);
    statuses[static_cast<size_t>(b.world_rank)] = r.status;
    return r.status;
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.to_string();
    EXPECT_THAT(s.message(), AllOf(HasSubstr("sglang_shared: ranks 1-2 cannot open rank 0's memfd"),
                                   HasSubstr("rank 0 is in PID namespace pid:[h200-0 rank 0]"),
                                   HasSubstr("rank 1 in pid:[h200-0 rank 1]"), HasSubstr("--pid=host"),
                                   HasSubstr("shareProcessNamespace")));
  }
}

TEST(SglangShared, PlanRefusesAPidNamespacePerRank) {
  auto plan = plan_text(
      "hosts: [{name: h, gpus: 4, pid_namespace: per_rank}]\nlayout: {tp: 1, dp: 4}\n"
      "config: {cpu_offload: true, placement: sglang_shared}\n");
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(),
              AllOf(HasSubstr("ranks 0-3 on host 'h'"), HasSubstr("hosts[0].pid_namespace: per_rank"),
                    HasSubstr("--pid=host"), HasSubstr("shareProcessNamespace")));
  // The same hosts with one PID namespace, or a placement that opens no memfd, plan.
  EXPECT_TRUE(plan_text("hosts: [{name: h, gpus: 4, pid_namespace: shared}]\nlayout: {tp: 1, dp: 4}\n"
                        "config: {cpu_offload: true, placement: sglang_shared}\n").is_ok());
  EXPECT_TRUE(plan_text("hosts: [{name: h, gpus: 4, pid_namespace: per_rank}]\nlayout: {tp: 1, dp: 4}\n"
                        "config: {cpu_offload: true, placement: sglang_private}\n").is_ok());
}

// -------------------------------------------------------------- sglang_file

TEST(SglangFile, PlanHoldsOnePageCacheCopyPerNodeUnpinned) {
  auto plan = plan_text("hosts: [{name: h, count: 2, gpus: 4}]\nlayout: {tp: 1, dp: 8}\n"
                        "config: {cpu_offload: true, placement: sglang_file}\n");
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const uint64_t tables = plan->model.table_bytes_total;
  for (const RankPlan& r : plan->ranks) {
    EXPECT_EQ(r.placement, Placement::kSglangFile);
    EXPECT_EQ(r.memory.host_pinned_bytes, 0u);  // unpinned
    EXPECT_EQ(r.memory.host_shared_mapped_bytes, tables);
  }
  for (const HostMemory& h : plan->hosts) {
    EXPECT_EQ(h.table_copies, 1);
    EXPECT_EQ(h.shared_copy_bytes, tables);
    EXPECT_EQ(h.shm_bytes, 0u);
  }
}

TEST(SglangFile, EveryRowOfA2048RowTableOnTheEmulatorAndTheNamesGo) {
  std::vector<RankResult> results(2);
  size_t files_left = 99;
  auto run = sim::run_world(one_host(2, PidNamespaces::kPerRank), [&](RankBackend& b) -> Status {
    RankResult& r = results[static_cast<size_t>(b.world_rank)];
    {
      // Built, every rank has mapped it, so the writer has removed its name
      // already (a job killed from here on leaves no file): nothing to open.
      ModelSpec model;
      model.tables = {sglang_test_table()};
      PlacementContext context{.backend = b, .group = *b.world, .tp_group = *b.world, .host_group = *b.world,
                               .host_writer_world_rank = 0, .model = model, .fill_seed = kFillSeed, .job_id = "sgl"};
      auto built = placement_ops(Placement::kSglangFile).build(context);
      ENGRAM_RETURN_IF_ERROR(built.status());
      auto again = b.memfd->open_file_read_only(shm_segment_prefix("sgl", kFixedShmNamePart) + "layer1.table", 1);
      if (b.world_rank == 0) files_left = again.is_ok() ? 1 : 0;
      ENGRAM_RETURN_IF_ERROR(b.world->barrier());  // nobody builds the next copy before rank 0 has looked
      ENGRAM_RETURN_IF_ERROR(built.value()->release());
    }
    r = build_and_look_up(Placement::kSglangFile, b, *b.world, *b.world);
    return r.status;
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  for (int rank = 0; rank < 2; ++rank) {
    const RankResult& r = results[static_cast<size_t>(rank)];
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_TRUE(r.equal) << "rank " << rank;
    EXPECT_TRUE(r.on_cpu) << "rank " << rank;
  }
  EXPECT_EQ(files_left, 0u);
}

// ------------------------------------------------------- sglang_numa_shared

// The table file SGLang's `file` layout maps lives on a real file system
// (/tmp); one too small for it answered a SIGBUS in the middle of the fill (a
// one-layer V4.1 table into a 64 GiB /tmp, on a GPU machine). Its pages are
// reserved first now: resource_exhausted naming the room there and the fix,
// and the file is gone. A 4 MiB tmpfs in a private mount namespace stands in.
TEST(SglangFile, ATableFileItsDirectoryCannotHoldIsRefusedNamingTheRoomAndTheFix) {
  if (const std::string& why = testing::why_no_private_tmpfs(); !why.empty()) GTEST_SKIP() << "SKIPPED: " << why;
  testing::TempDir dir("/tmp/engramlab-sglang-file-room");
  ASSERT_FALSE(dir.path.empty());
  const testing::ChildRun run = testing::run_in_child([&] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, "size=4m") != 0)
      ::_exit(90);
    memfd::ProcFdSharedMemory memory(dir.path);
    auto made = memory.create_file("engramlab-test-table", 16 << 20);
    std::string said = made.is_ok() ? std::string("created") : made.status().to_string();
    return said + (::access((dir.path + "/engramlab-test-table").c_str(), F_OK) == 0 ? "\nleft" : "\ngone");
  });
  const std::string& said = run.said;
  ASSERT_TRUE(WIFEXITED(run.wait_status) && WEXITSTATUS(run.wait_status) == 0)
      << "wait status " << run.wait_status << "; said: " << said;
  EXPECT_THAT(said, HasSubstr("resource_exhausted"));
  EXPECT_THAT(said, HasSubstr("reserving the 16777216 bytes (16.0 MiB) of table file " + dir.path));
  EXPECT_THAT(said, HasSubstr("No space left on device"));
  EXPECT_THAT(said, HasSubstr(dir.path + " has 4.0 MiB free for a 16.0 MiB table file"));
  EXPECT_THAT(said, HasSubstr("--placement sglang_shared"));
  EXPECT_THAT(said, HasSubstr("\ngone"));
}

TEST(SglangNumaShared, PlanHoldsOneCopyPerSocketOfTheGpus) {
  for (int sockets : {1, 2, 4}) {
    auto plan = plan_text(fmt::format("hosts: [{{name: h, gpus: 8, cpu_sockets: {}}}]\nlayout: {{tp: 2, dp: 4}}\n"
                                      "config: {{cpu_offload: true, placement: sglang_numa_shared}}\n",
                                      sockets));
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    ASSERT_EQ(plan->hosts.size(), 1u);
    EXPECT_EQ(plan->hosts[0].table_copies, sockets);
    EXPECT_EQ(plan->hosts[0].host_table_bytes, plan->model.table_bytes_total * static_cast<uint64_t>(sockets));
    EXPECT_EQ(plan->hosts[0].shm_bytes, 0u);
  }
}

TEST(SglangNumaShared, EachSocketsRanksShareTheirCopyOnTheEmulator) {
  // Four GPUs on two sockets: ranks 0-1 on node 0, 2-3 on node 1; each node's lowest rank writes its copy.
  sim::WorldSpec spec = one_host(4, PidNamespaces::kShared);
  spec.hosts[0].cpu_sockets = 2;
  std::vector<RankResult> results(4);
  std::vector<uint64_t> written(4, 0);
  auto run = sim::run_world(spec, [&](RankBackend& b) -> Status {
    ModelSpec model;
    model.tables = {sglang_test_table()};
    PlacementContext context{.backend = b, .group = *b.world, .tp_group = *b.world, .host_group = *b.world,
                             .host_writer_world_rank = 0, .model = model, .fill_seed = kFillSeed, .job_id = "sgl"};
    auto built = placement_ops(Placement::kSglangNumaShared).build(context);
    if (built.is_ok()) written[static_cast<size_t>(b.world_rank)] = built.value()->footprint().shared_host_bytes;
    RankResult& r = results[static_cast<size_t>(b.world_rank)];
    if (built.is_ok()) ENGRAM_RETURN_IF_ERROR(built.value()->release());
    r = build_and_look_up(Placement::kSglangNumaShared, b, *b.world, *b.world);
    return r.status;
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const uint64_t table = sglang_test_table().table_bytes();
  EXPECT_EQ(written, (std::vector<uint64_t>{table, 0, table, 0}));
  for (int rank = 0; rank < 4; ++rank) {
    const RankResult& r = results[static_cast<size_t>(rank)];
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_TRUE(r.equal) << "rank " << rank;
    EXPECT_TRUE(r.on_cpu) << "rank " << rank;
  }
}

// ----------------------------------------------------------- sglang_private

TEST(SglangPrivate, PlanSplitsOneTableIntoRowShardsOverTheGroup) {
  auto plan = plan_text(
      "hosts: [{name: h, gpus: 4}]\nlayout: {tp: 2, dp: 2}\nconfig: {cpu_offload: true, placement: sglang_private}\n");
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  uint64_t held = 0;
  for (const RankPlan& r : plan->ranks) {
    EXPECT_EQ(r.placement, Placement::kSglangPrivate);
    EXPECT_EQ(r.shard_group_size, 4);  // the world, SGLang's TP group under DP attention
    held += r.memory.host_private_bytes;
    EXPECT_EQ(r.memory.host_shared_mapped_bytes, 0u);
  }
  // One table over the four ranks (each rank's figure is the largest shard: at most a row a table above its own).
  EXPECT_GE(held, plan->model.table_bytes_total);
  EXPECT_LE(held, plan->model.table_bytes_total + 4 * 2 * plan->model.row_bytes);
  ASSERT_EQ(plan->hosts.size(), 1u);
  EXPECT_EQ(plan->hosts[0].host_table_bytes, held);
  EXPECT_EQ(plan->hosts[0].shm_bytes, 0u);
}

TEST(SglangPrivate, EveryRowOfA2048RowTableOnTheEmulatorStaysOnTheCpu) {
  // SGLang's private test: two TP ranks, rows split 1,024 + 1,024, zero-filled and summed.
  std::vector<RankResult> results(2);
  auto run = sim::run_world(one_host(2, PidNamespaces::kPerRank), [&](RankBackend& b) -> Status {
    RankResult& r = results[static_cast<size_t>(b.world_rank)];
    r = build_and_look_up(Placement::kSglangPrivate, b, *b.world, *b.world);
    return r.status;
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  for (int rank = 0; rank < 2; ++rank) {
    const RankResult& r = results[static_cast<size_t>(rank)];
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_TRUE(r.equal) << "rank " << rank;
    EXPECT_TRUE(r.on_cpu) << "rank " << rank;
  }
}

TEST(SglangPrivate, RanksWithTheirOwnTokensGetTheirOwnRowsBack) {
  // DP attention: every rank brings other ids (one all DEAD, one empty); the
  // rows owned by other members come back through the sum.
  TableSpec table = sglang_test_table();
  const std::vector<std::byte> bytes = testing::filled_table(table, 3);
  std::vector<std::vector<int64_t>> ids = {{0, 1024, 2047, 5, -1, 3000}, {}, {-1, -1}, {1023, 1025, 7, 2040}};
  const testing::PlacementRun run = testing::run_placement(Placement::kSglangPrivate, table, bytes, ids, 4, 9);
  for (size_t r = 0; r < ids.size(); ++r) {
    EXPECT_TRUE(run.statuses[r].is_ok()) << run.statuses[r].to_string();
    EXPECT_EQ(run.output[r], testing::direct_lookup(table, bytes, ids[r])) << "rank " << r;
  }
}

// ------------------------------------------------------ real processes

// Two ranks as forked processes over loopback TCP collectives, each with the
// real memfd backend. `rank1_in_own_pid_namespace`: rank 1 runs as
// `unshare --user --map-root-user --pid --fork` runs a command (pid 1 of a
// new PID namespace). Each rank writes its status to `dir`/rank<r>.
// Returns the exit codes (77 where the kernel refused the namespace).
constexpr int kPidNamespaceRefused = 77;

std::vector<int> run_real_pair(const std::string& dir, Placement placement, bool rank1_in_own_pid_namespace) {
  testing::LoopbackListener listener;
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    const pid_t pid = ::fork();
    if (pid != 0) {
      pids.push_back(pid);
      continue;
    }
    if (r != 0) listener.close();  // only rank 0 may hold the listening socket
    if (r == 1 && rank1_in_own_pid_namespace) {
      if (::unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0) ::_exit(kPidNamespaceRefused);
      const pid_t init = ::fork();  // pid 1 of the new namespace
      if (init < 0) ::_exit(1);
      if (init != 0) {
        int status = 0;
        ::waitpid(init, &status, 0);
        ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 3);
      }
    }
    ipc::TcpCollectivesOptions o =
        testing::forked_rank_options(listener, r, 2, "0123456789abcdef0123456789abcdef", "sglang-pair");
    o.join_timeout = std::chrono::milliseconds(10000);
    o.op_timeout = std::chrono::milliseconds(10000);
    auto world = ipc::TcpCollectives::join(o);
    if (!world.is_ok()) ::_exit(50);
    memfd::ProcFdSharedMemory memfds(dir);  // table files in the test's own directory
    RankBackend backend;
    backend.world_rank = r;
    backend.world_size = 2;
    backend.world = world->get();
    backend.memfd = &memfds;
    const RankResult result = build_and_look_up(placement, backend, **world, **world);
    std::ofstream(dir + "/rank" + std::to_string(r))
        << (result.status.is_ok() ? std::string("ok") : result.status.to_string()) << "\n"
        << (result.equal ? "equal" : "differs") << "\n"
        << (result.on_cpu ? "cpu" : "device") << "\n";
    ::_exit(result.status.is_ok() ? 0 : 1);
  }
  listener.close();
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
  }
  return codes;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SglangSharedReal, TwoProcessesShareOneMemfdAndReadEveryRow) {
  testing::TempDir dir("/tmp/engramlab-sglang-real");
  const std::vector<int> codes = run_real_pair(dir.path, Placement::kSglangShared, false);
  for (int r = 0; r < 2; ++r) {
    const std::string text = read_text(dir.path + "/rank" + std::to_string(r));
    EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << text;
    EXPECT_EQ(text, "ok\nequal\ncpu\n") << "rank " << r;
  }
}

TEST(SglangPrivateReal, TwoProcessesSplitTheRowsAndReadEveryRow) {
  testing::TempDir dir("/tmp/engramlab-sglang-private");
  const std::vector<int> codes = run_real_pair(dir.path, Placement::kSglangPrivate, false);
  for (int r = 0; r < 2; ++r) {
    const std::string text = read_text(dir.path + "/rank" + std::to_string(r));
    EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << text;
    EXPECT_EQ(text, "ok\nequal\ncpu\n") << "rank " << r;
  }
}

TEST(SglangFileReal, TwoProcessesMapOneTableFileAndReadEveryRow) {
  testing::TempDir dir("/tmp/engramlab-sglang-file");
  const std::vector<int> codes = run_real_pair(dir.path, Placement::kSglangFile, false);
  for (int r = 0; r < 2; ++r) {
    const std::string text = read_text(dir.path + "/rank" + std::to_string(r));
    EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << text;
    EXPECT_EQ(text, "ok\nequal\ncpu\n") << "rank " << r;
  }
}

TEST(SglangSharedReal, ARankInItsOwnPidNamespaceGetsTheNamedError) {
  testing::TempDir dir("/tmp/engramlab-sglang-pidns");
  const std::vector<int> codes = run_real_pair(dir.path, Placement::kSglangShared, true);
  if (codes[1] == kPidNamespaceRefused)
    GTEST_SKIP() << "the kernel refused unshare(CLONE_NEWUSER | CLONE_NEWPID) here (unprivileged user namespaces off)";
  std::string own_namespace(128, '\0');
  own_namespace.resize(static_cast<size_t>(::readlink("/proc/self/ns/pid", own_namespace.data(), 127)));
  for (int r = 0; r < 2; ++r) {
    const std::string text = read_text(dir.path + "/rank" + std::to_string(r));
    EXPECT_EQ(codes[static_cast<size_t>(r)], 1) << text;
    EXPECT_THAT(text, AllOf(HasSubstr("failed_precondition"), HasSubstr("sglang_shared: rank 1 cannot open rank 0's memfd"),
                            HasSubstr("rank 0 is in PID namespace " + own_namespace), HasSubstr("rank 1 in pid:["),
                            HasSubstr("--pid=host")))
        << "rank " << r;
    std::printf("rank %d, the real backend's error: %s", r, text.substr(0, text.find('\n') + 1).c_str());
  }
}

}  // namespace
}  // namespace engram
