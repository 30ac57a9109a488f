// `engramlab bench`, one rank: the device lookup timed through the runtime,
// one process per GPU. For every placement asked for, the rank starts the
// runtime with the config that asks for it (the plan decides as it does for
// an engine, so a placement this machine cannot take is listed with the
// plan's reason, not dropped), looks up the same draws of ids for each
// (random rows, DEAD, out-of-table, -0 and NaN rows; BenchIdDraws), checks
// every draw's sampled slots against the CPU reference, and times the lookup
// under graph replay (DeviceGraph::time), the replays spread over the draws.
// Beside it, the same run's ceilings on this rank's device: an HBM copy and a
// pinned host-to-device copy of the bytes the lookup reads; and on rank 0,
// optionally, the one-process kernel reference (the kernels timed straight on
// its GPU over the same draws of ids, with the NVLink copy where a second GPU
// is visible), before the placements, after them, or both.
//
// The same body runs on real processes (apps/bench_command.cc, under a
// launcher) and on the emulator (tests/bench_rank_test.cc), as the
// acceptance test does (operator_checks/acceptance_rank.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/backend/rank_backend.h"
#include "core/base/status.h"
#include "core/base/warnings.h"
#include "core/placements/placement.h"
#include "operator_checks/bench_stats.h"
#include "core/runtime/engram_runtime.h"

namespace engram::operator_checks {

// The ids every figure of one size is timed over, the runtime's and the
// one-process kernels' alike: `draws` draws of tokens x heads ids each
// (make_lookup_test_ids: rows of each head's range, DEAD, out-of-table,
// negative, -0 and NaN rows), the timed replays spread over them and pooled.
// One draw replays the same few rows, and which rows they are moves a small
// lookup's time by several per cent (benchmarks/table_memory_probe), so a
// ratio holds both sides to the same draws.
struct BenchIdDraws {
  int draws = 0;
  std::function<std::vector<int64_t>(int tokens, int draw)> ids;
};
// The fingerprint of every draw's ids at `tokens`: splitmix64_fold of each
// draw in order, starting from `tokens` (the one-process bench folds its
// draws the same way, LookupBenchPoint::ids_fingerprint): what a figure says
// it was timed over.
uint64_t id_draws_fingerprint(const BenchIdDraws& draws, int tokens);

// The one-process kernel figures of one token count, on rank 0's GPU alone.
struct OneProcessPoint {
  int tokens = 0;
  uint64_t ids_fingerprint = 0;          // of the ids its lookups were timed over (splitmix64_fold, draw order)
  LatencyPercentiles peer_kernel;        // gather_peer over one local table
  LatencyPercentiles plain_kernel;       // a warp per row, raw bytes
  bool nccl_path_ran = false;            // false without NCCL
  LatencyPercentiles nccl_path;          // all-gather, gather_owned, reduce-scatter (one member)
  bool nvlink_copy_ran = false;          // false with one visible GPU
  LatencyPercentiles nvlink_copy;        // the lookup's row bytes streamed from the next GPU
};
struct OneProcessFigures {
  std::string device_name;
  int64_t table_rows = 0;
  uint64_t row_bytes = 0;
  std::vector<OneProcessPoint> points;   // one per token count, in order
  std::vector<std::string> notes;
};
// Runs the reference for these token counts over a table of `table`'s shape
// (its heads, and its rows unless the bench was told another size), timing
// its lookups over `ids` (rank 0's draws); called on rank 0 while the other
// ranks wait.
using OneProcessReference = std::function<Result<OneProcessFigures>(
    const std::vector<int>& token_counts, const TableSpec& table, const BenchIdDraws& ids)>;

struct BenchOptions {
  // Table model, layout, job id, fill seed and shard group; the bench sets
  // cpu_offload, peer_shards and dp_shared_memory per placement and raises
  // tokens_per_rank_max to the largest token count.
  RuntimeOptions runtime;
  std::vector<Placement> placements;     // asked for; empty: every placement
  std::vector<int> token_counts = {1, 16, 64, 256, 1024, 8192};
  int table_index = 0;                   // the table timed (every table is built)
  int sampled_slots = 64;                // per size, checked against the CPU reference
  int warmup_replays = 20;
  int timed_replays = 200;
  int id_draws = 8;                      // draws of ids the timed replays spread over (BenchIdDraws); <= timed_replays
  uint64_t ids_seed = 1;
  OneProcessReference reference;         // empty: no reference column (the emulator)
  // Start every placement with runtime.config as it is (a deployment
  // file's, `bench --file`) instead of the config that asks for it.
  bool config_as_given = false;
  // When the one-process reference is timed: before the placements, after
  // them, or both (each in turn holds the GPU's memory, and a process's
  // later large tables are laid out differently from its first).
  enum class ReferenceOrder { kFirst, kLast, kBoth };
  ReferenceOrder reference_order = ReferenceOrder::kBoth;
};

// One timed figure on this rank, and the slowest rank's median.
struct BenchCell {
  bool ran = false;
  LatencyPercentiles latency;
  double latency_us_p50_slowest_rank = 0;
};

struct BenchPlacementRow {
  Placement placement = Placement::kDeviceCollective;
  std::string asked_with;                // the flags that ask the plan for it
  bool ran = false;
  std::string not_run_reason;            // why not, where !ran
  double build_seconds = 0;              // EngramRuntime::start
  std::vector<BenchCell> cells;          // one per token count
  int64_t slots_checked = 0;             // against the CPU reference, all sizes
  std::optional<HandleType> handle_type; // where it ran and its group agreed one (device_peer)
};

struct BenchCeilings {
  int tokens = 0;
  uint64_t read_bytes = 0;               // tokens x heads x row_bytes: what the lookup reads
  BenchCell hbm_copy;                    // device to device, read_bytes
  BenchCell pinned_host_copy;            // registered host memory to device, read_bytes
};

struct BenchReport {
  int rank = 0;
  int world_size = 0;
  ParallelLayout layout;
  std::string table_model;
  int layer_id = 0;
  int64_t table_rows = 0;
  uint64_t row_bytes = 0;
  int heads = 0;
  int dim = 0;
  int warmup_replays = 0;
  int timed_replays = 0;
  int id_draws = 0;
  std::vector<int> token_counts;
  std::vector<uint64_t> ids_fingerprints;     // this rank's timed ids, one per token count (id_draws_fingerprint)
  std::vector<BenchPlacementRow> placements;  // every placement, registry order
  std::vector<BenchCeilings> ceilings;        // one per token count
  std::optional<OneProcessFigures> reference; // rank 0, where a reference was given and ran
  std::optional<OneProcessFigures> reference_after;  // rank 0, the second one of ReferenceOrder::kBoth
  std::vector<std::string> notes;
};

// Errors: invalid_argument naming the flag (token counts, replays, the table
// index, placements), failed_precondition without a DeviceCompute (the rank
// opened no GPU), internal naming rank, placement and slot where a lookup
// disagrees with the CPU reference, and whatever the runtime or a collective
// returns. A placement the plan does not give here, or whose device lookup is
// not built for this layout, is a row with its reason, not an error.
Status run_bench_rank(RankBackend& backend, BenchOptions options, WarningSink& sink, BenchReport& report);
// The invalid_argument checks run_bench_rank starts with (token counts,
// replays, the table index), for the command to refuse bad flags (exit 2)
// before the rank starts.
Status check_bench_options(const BenchOptions& options, int rank);

// The flags that ask the plan for `placement` ("--cpu-offload", ...).
std::string bench_placement_flags(Placement placement);

}  // namespace engram::operator_checks
