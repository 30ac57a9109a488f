// The bench's rank body on the emulator: every placement is a row of the
// table, run through the runtime's device lookup on emulated device memory
// (checked against the CPU reference, timed by graph replay) or listed with
// the plan's reason; the ceilings are timed; bad options are invalid
// arguments naming the flag; nothing is left in the ledger. The same body
// runs on GPUs under a launcher (engramlab bench).
#include "operator_checks/bench_rank.h"

#include <gtest/gtest.h>

#include <mutex>

#include "core/base/units.h"
#include "operator_checks/bench_table.h"
#include "sim/world.h"

namespace engram {
namespace {

using namespace operator_checks;  // the code under test

HostSpec host(uint64_t tmpfs_bytes, int gpus) {
  HostSpec h;
  h.name = "gb200-0";
  h.gpu_count = gpus;
  h.gpu_model = "GB200";
  h.tmpfs_bytes_total = tmpfs_bytes;
  h.nvlink_domain = "nvl-0";
  h.imex_channel = true;
  h.fabric_attribute = true;
  return h;
}

BenchOptions small_options(int ranks) {
  BenchOptions o;
  o.runtime.table_model = model_preset("tiny").value();
  o.runtime.layout = ParallelLayout{1, ranks};
  o.token_counts = {1, 5, 40};
  o.sampled_slots = 16;
  o.warmup_replays = 1;
  o.timed_replays = 2;
  return o;
}

struct BenchRun {
  std::vector<operator_checks::BenchReport> reports;
  std::string summary;
  bool ok = false;
  bool leaks = false;
};

BenchRun run_bench(uint64_t tmpfs_bytes, int ranks, const BenchOptions& options, uint64_t seed) {
  sim::WorldSpec spec;
  spec.hosts = {host(tmpfs_bytes, ranks)};
  spec.seed = seed;
  std::mutex mutex;
  BenchRun out;
  out.reports.resize(static_cast<size_t>(ranks));
  WarningSink sink;
  auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
    operator_checks::BenchReport report;
    ENGRAM_RETURN_IF_ERROR(operator_checks::run_bench_rank(backend, options, sink, report));
    std::lock_guard lock(mutex);
    out.reports[static_cast<size_t>(backend.world_rank)] = std::move(report);
    return Status::ok();
  });
  if (!run.is_ok()) {
    out.summary = run.status().to_string();
    return out;
  }
  out.ok = run->all_ok();
  out.leaks = !run->leaks.empty();
  out.summary = run->summary();
  return out;
}

const BenchPlacementRow& row(const BenchReport& r, Placement p) {
  for (const BenchPlacementRow& row : r.placements)
    if (row.placement == p) return row;
  ADD_FAILURE() << "no row for " << placement_name(p);
  return r.placements.front();
}

// /dev/shm large enough: --cpu-offload gives host_shared, so host_head_sharded
// is listed with the plan's reason; /dev/shm too small: the other way round.
TEST(BenchRank, EveryPlacementIsARowRunThroughTheRuntimeOrListedWithTheReason) {
  struct Case {
    const char* name;
    uint64_t tmpfs_bytes;
    int ranks;
    Placement offload_gives;
    Placement not_here;
  } cases[] = {
      {"/dev/shm holds the tables, 4 ranks", 190 * kGiB, 4, Placement::kHostShared, Placement::kHostHeadSharded},
      {"/dev/shm too small, 2 ranks", 64 * kMiB, 2, Placement::kHostHeadSharded, Placement::kHostShared},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const BenchOptions options = small_options(c.ranks);
    const BenchRun run = run_bench(c.tmpfs_bytes, c.ranks, options, 61);
    ASSERT_TRUE(run.ok) << run.summary;
    EXPECT_FALSE(run.leaks) << run.summary;
    for (const BenchReport& r : run.reports) {
      ASSERT_EQ(r.placements.size(), placement_registry().size());
      for (const BenchPlacementRow& p : r.placements) {
        SCOPED_TRACE(placement_name(p.placement));
        if (p.placement == c.not_here) {
          EXPECT_FALSE(p.ran);
          EXPECT_NE(p.not_run_reason.find(std::string("the plan gives ") + placement_name(c.offload_gives) +
                                          " for --cpu-offload here"),
                    std::string::npos)
              << p.not_run_reason;
          continue;
        }
        if (std::string_view(placement_name(p.placement)).starts_with("sglang_")) {
          // SGLang's host layouts look up on the CPU here: the bench times device lookups.
          EXPECT_FALSE(p.ran);
          EXPECT_NE(p.not_run_reason.find("on the CPU here"), std::string::npos) << p.not_run_reason;
          continue;
        }
        ASSERT_TRUE(p.ran) << p.not_run_reason;
        EXPECT_GT(p.slots_checked, 0);
        ASSERT_EQ(p.cells.size(), options.token_counts.size());
        for (const BenchCell& cell : p.cells) {
          EXPECT_TRUE(cell.ran);
          EXPECT_LE(cell.latency.p10_us, cell.latency.p90_us);
          EXPECT_GE(cell.latency_us_p50_slowest_rank, cell.latency.p50_us);
        }
      }
      ASSERT_EQ(r.ceilings.size(), options.token_counts.size());
      for (const BenchCeilings& ceiling : r.ceilings) {
        EXPECT_TRUE(ceiling.hbm_copy.ran);
        EXPECT_TRUE(ceiling.pinned_host_copy.ran);
        EXPECT_EQ(ceiling.read_bytes, static_cast<uint64_t>(ceiling.tokens) * 4 * r.row_bytes);
      }
      EXPECT_FALSE(r.reference.has_value()) << "no reference was given";
    }
    // Rank 0's table names every placement, the reason of the one not run,
    // and the CSV has a line for it.
    const BenchReport& r0 = run.reports[0];
    const std::string table = operator_checks::format_bench_table(r0);
    for (const PlacementOps& ops : placement_registry())
      EXPECT_NE(table.find(std::string("| ") + ops.name + " | "), std::string::npos) << ops.name << "\n" << table;
    EXPECT_NE(table.find("not run: the plan gives"), std::string::npos) << table;
    const std::string csv = operator_checks::format_bench_csv(r0);
    EXPECT_NE(csv.find(std::string(placement_name(c.not_here)) + ",,"), std::string::npos) << csv;
    EXPECT_NE(csv.find("ceiling_pinned_host_copy,40,"), std::string::npos) << csv;
    EXPECT_TRUE(render_log_log_svg(operator_checks::bench_plot(r0)).is_ok());
  }
}

TEST(BenchRank, PlacementsNotAskedForAreListedAsSuch) {
  operator_checks::BenchOptions options = small_options(2);
  options.placements = {Placement::kDevicePeer};
  const BenchRun run = run_bench(190 * kGiB, 2, options, 67);
  ASSERT_TRUE(run.ok) << run.summary;
  EXPECT_FALSE(run.leaks) << run.summary;
  for (const BenchReport& r : run.reports) {
    EXPECT_TRUE(row(r, Placement::kDevicePeer).ran);
    EXPECT_EQ(row(r, Placement::kDeviceCollective).not_run_reason, "not asked for (--placements)");
  }
}

TEST(BenchRank, BadOptionsAreInvalidArgumentsNamingTheFlag) {
  struct Case {
    const char* name;
    void (*change)(BenchOptions&);
    const char* message;
  } cases[] = {
      {"no tokens", [](BenchOptions& o) { o.token_counts = {}; }, "--tokens: give at least one token count"},
      {"zero tokens", [](BenchOptions& o) { o.token_counts = {4, 0}; }, "--tokens: 0 is not a positive token count"},
      {"no replays", [](BenchOptions& o) { o.timed_replays = 0; }, "--replays 0 must be >= 1"},
      {"table out of range", [](BenchOptions& o) { o.table_index = 5; }, "--table: 5 is not a table of tiny"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    operator_checks::BenchOptions options = small_options(1);
    c.change(options);
    sim::WorldSpec spec;
    spec.hosts = {host(190 * kGiB, 1)};
    spec.seed = 71;
    WarningSink sink;
    auto run = sim::run_world(spec, [&](RankBackend& backend) -> Status {
      operator_checks::BenchReport report;
      const Status s = operator_checks::run_bench_rank(backend, options, sink, report);
      if (s.code() != ErrorCode::kInvalidArgument || s.message().find(c.message) == std::string::npos ||
          s.context().rank != 0)
        return internal_error("expected invalid_argument saying '" + std::string(c.message) + "', got " + s.to_string());
      return Status::ok();
    });
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    EXPECT_TRUE(run->all_ok()) << run->summary();
    EXPECT_TRUE(run->leaks.empty()) << run->summary();
  }
}

TEST(BenchRank, NoDeviceIsAFailedPreconditionNamingTheGpu) {
  sim::WorldSpec spec;
  spec.hosts = {host(190 * kGiB, 1)};
  spec.seed = 73;
  const BenchOptions options = small_options(1);
  WarningSink sink;
  auto run = sim::run_world(spec, [&](RankBackend backend) -> Status {
    backend.compute = nullptr;
    operator_checks::BenchReport report;
    const Status s = operator_checks::run_bench_rank(backend, options, sink, report);
    if (s.code() != ErrorCode::kFailedPrecondition || s.message().find("GPU") == std::string::npos)
      return internal_error("expected failed_precondition naming the missing GPU, got " + s.to_string());
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
}

}  // namespace
}  // namespace engram
