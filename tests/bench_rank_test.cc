// The bench's rank body on the emulator: every placement is a row of the
// table, run through the runtime's device lookup on emulated device memory
// (checked against the CPU reference, timed by graph replay) or listed with
// the plan's reason; the ceilings are timed; bad options are invalid
// arguments naming the flag; nothing is left in the ledger. The same body
// runs on GPUs under a launcher (engramlab bench).
#include "operator_checks/bench_rank.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <mutex>

#include "core/base/splitmix64.h"
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
  o.id_draws = 2;
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
      {"no draws of ids", [](BenchOptions& o) { o.id_draws = 0; }, "--id-draws 0 must be from 1 to --replays (2)"},
      {"more draws than replays", [](BenchOptions& o) { o.id_draws = 3; },
       "--id-draws 3 must be from 1 to --replays (2)"},
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

// What a test double of the one-process reference returns: every size's
// peer kernel at `p50_us`, marked as timed over the ids `fingerprint` says.
OneProcessFigures reference_double(const std::vector<int>& token_counts, const TableSpec& table, double p50_us,
                                   const std::function<uint64_t(int tokens)>& fingerprint) {
  OneProcessFigures figures;
  figures.table_rows = table.row_count();
  figures.row_bytes = table.row_bytes();
  for (int tokens : token_counts) {
    OneProcessPoint point;
    point.tokens = tokens;
    point.ids_fingerprint = fingerprint(tokens);
    point.peer_kernel = {p50_us - 1, p50_us, p50_us + 1};
    figures.points.push_back(point);
  }
  return figures;
}

// The one-process reference is handed rank 0's draws of ids, before and
// after the placements (the default order), and the ratio is printed only
// where the figures it returns say they timed those: over the mean of the
// two runs. A reference that times other ids gets "n/a" and the sizes
// named. (The reference here is a test double at the callback seam: on the
// emulator no one-process kernel exists; what it returns is the contract's
// other side.)
TEST(BenchRank, TheReferenceTimesTheRuntimesIdsOrGetsNoRatio) {
  for (const bool honest : {true, false}) {
    SCOPED_TRACE(honest ? "the reference folds the ids it was given" : "the reference times ids of its own");
    BenchOptions options = small_options(2);  // device_peer needs its rows over two GPUs
    options.placements = {Placement::kDevicePeer};
    options.timed_replays = 6;
    options.id_draws = 3;
    ASSERT_EQ(options.reference_order, BenchOptions::ReferenceOrder::kBoth) << "the default brackets the placements";
    std::vector<std::vector<std::vector<int64_t>>> seen;  // [call x size][draw] ids, as handed over
    int calls = 0;
    options.reference = [&](const std::vector<int>& token_counts, const TableSpec& table,
                            const BenchIdDraws& ids) -> Result<OneProcessFigures> {
      EXPECT_EQ(ids.draws, 3);
      ++calls;
      // The ids as handed over, folded as the bench folds them, or not.
      auto fingerprint = [&](int tokens) {
        uint64_t folded_ids = static_cast<uint64_t>(tokens);
        seen.emplace_back();
        for (int d = 0; d < ids.draws; ++d) {
          std::vector<int64_t> draw = ids.ids(tokens, d);
          EXPECT_EQ(draw.size(), static_cast<size_t>(tokens) * table.head_count());
          EXPECT_EQ(draw, ids.ids(tokens, d)) << "a draw is the same each time it is asked for";
          const std::vector<int64_t> folded = honest ? draw : std::vector<int64_t>{7};
          folded_ids = splitmix64_fold(folded_ids, folded.data(), folded.size());
          seen.back().push_back(std::move(draw));
        }
        return folded_ids;
      };
      // Before, after: the ratio divides by their mean, 3.0.
      return reference_double(token_counts, table, calls == 1 ? 2.0 : 4.0, fingerprint);
    };
    const BenchRun run = run_bench(190 * kGiB, 2, options, 79);
    ASSERT_TRUE(run.ok) << run.summary;
    EXPECT_FALSE(run.leaks) << run.summary;
    EXPECT_EQ(calls, 2);
    const BenchReport& r = run.reports[0];
    ASSERT_TRUE(r.reference.has_value());
    ASSERT_TRUE(r.reference_after.has_value());
    EXPECT_EQ(r.reference->points[0].peer_kernel.p50_us, 2.0) << "the run before the placements";
    EXPECT_EQ(r.reference_after->points[0].peer_kernel.p50_us, 4.0) << "the run after them";
    const size_t sizes = options.token_counts.size();
    ASSERT_EQ(r.ids_fingerprints.size(), sizes);
    ASSERT_EQ(seen.size(), 2 * sizes);
    for (size_t i = 0; i < sizes; ++i) {
      EXPECT_NE(seen[i][0], seen[i][1]) << "each draw is a draw of its own";
      EXPECT_EQ(seen[i], seen[sizes + i]) << "before and after, the same draws";
      EXPECT_EQ(r.reference->points[i].ids_fingerprint == r.ids_fingerprints[i], honest);
    }
    const std::string table = format_bench_table(r);
    const size_t ratios = table.find("runtime / one-process");
    ASSERT_NE(ratios, std::string::npos) << table;
    const std::string ratio_block = table.substr(ratios, table.find("\n\n", ratios) - ratios);
    const BenchCell& cell = row(r, Placement::kDevicePeer).cells.back();
    ASSERT_TRUE(cell.ran);
    const std::string bracketed = fmt::format("| 40 | {:.2f}x |", cell.latency.p50_us / 3.0);
    if (honest) {
      EXPECT_NE(ratio_block.find("same table, same ids"), std::string::npos) << ratio_block;
      EXPECT_NE(ratio_block.find("the mean of the runs before and after"), std::string::npos) << ratio_block;
      EXPECT_NE(ratio_block.find(bracketed), std::string::npos) << bracketed << "\n" << ratio_block;
      EXPECT_NE(table.find("| 2.0 / 4.0 |"), std::string::npos) << "both runs' figures are shown\n" << table;
    } else {
      EXPECT_NE(ratio_block.find("OTHER ids (no ratio) at tokens 1 5 40"), std::string::npos) << ratio_block;
      EXPECT_NE(ratio_block.find("| 40 | n/a |"), std::string::npos) << ratio_block;
    }
  }
}

// With the reference timed only before the placements (--reference-order
// first), the ratio divides by that one run.
TEST(BenchRank, AReferenceBeforeThePlacementsAloneIsTheRatiosDivisor) {
  BenchOptions options = small_options(2);  // device_peer needs its rows over two GPUs
  options.placements = {Placement::kDevicePeer};
  options.reference_order = BenchOptions::ReferenceOrder::kFirst;
  int calls = 0;
  options.reference = [&](const std::vector<int>& token_counts, const TableSpec& table,
                          const BenchIdDraws& ids) -> Result<OneProcessFigures> {
    ++calls;
    return reference_double(token_counts, table, 2.0, [&](int tokens) { return id_draws_fingerprint(ids, tokens); });
  };
  const BenchRun run = run_bench(190 * kGiB, 2, options, 89);
  ASSERT_TRUE(run.ok) << run.summary;
  EXPECT_EQ(calls, 1);
  const BenchReport& r = run.reports[0];
  EXPECT_FALSE(r.reference_after.has_value());
  const std::string table = format_bench_table(r);
  const BenchCell& cell = row(r, Placement::kDevicePeer).cells.back();
  EXPECT_NE(table.find(fmt::format("| 40 | {:.2f}x |", cell.latency.p50_us / 2.0)), std::string::npos) << table;
  EXPECT_EQ(table.find("before and after"), std::string::npos) << table;
}

// Every draw is looked up and checked: two draws check twice the slots of one
// (each draw has the same special slots and samples), and the timed replays
// spread over the draws.
TEST(BenchRank, EveryDrawOfIdsIsCheckedAgainstTheCpu) {
  int64_t checked[2] = {0, 0};
  for (int draws : {1, 2}) {
    BenchOptions options = small_options(2);  // device_peer needs its rows over two GPUs
    options.placements = {Placement::kDevicePeer};
    options.id_draws = draws;
    const BenchRun run = run_bench(190 * kGiB, 2, options, 83);
    ASSERT_TRUE(run.ok) << run.summary;
    checked[draws - 1] = row(run.reports[0], Placement::kDevicePeer).slots_checked;
  }
  EXPECT_GT(checked[0], 0);
  EXPECT_EQ(checked[1], 2 * checked[0]);
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
