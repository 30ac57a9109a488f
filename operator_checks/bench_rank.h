// `engramlab bench`, one rank: the device lookup timed through the runtime,
// one process per GPU. For every placement asked for, the rank starts the
// runtime with the config that asks for it (the plan decides as it does for
// an engine, so a placement this machine cannot take is listed with the
// plan's reason, not dropped), looks up the same ids for each (random rows,
// DEAD, out-of-table, -0 and NaN rows), checks sampled slots against the CPU
// reference, and times the lookup under graph replay (DeviceGraph::time).
// Beside it, the same run's ceilings on this rank's device: an HBM copy and a
// pinned host-to-device copy of the bytes the lookup reads; and on rank 0,
// optionally, the one-process kernel reference (the kernels timed straight on
// its GPU, with the NVLink copy where a second GPU is visible).
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
#include "core/report/bench_stats.h"
#include "core/runtime/engram_runtime.h"

namespace engram::operator_checks {

// The one-process kernel figures of one token count, on rank 0's GPU alone.
struct OneProcessPoint {
  int tokens = 0;
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
// (its heads, and its rows unless the bench was told another size); called
// on rank 0 while the other ranks wait.
using OneProcessReference =
    std::function<Result<OneProcessFigures>(const std::vector<int>& token_counts, const TableSpec& table)>;

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
  uint64_t ids_seed = 1;
  OneProcessReference reference;         // empty: no reference column (the emulator)
  // Start every placement with runtime.config as it is (a deployment
  // file's, `bench --file`) instead of the config that asks for it.
  bool config_as_given = false;
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
  std::vector<int> token_counts;
  std::vector<BenchPlacementRow> placements;  // every placement, registry order
  std::vector<BenchCeilings> ceilings;        // one per token count
  std::optional<OneProcessFigures> reference; // rank 0, where a reference was given and ran
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
