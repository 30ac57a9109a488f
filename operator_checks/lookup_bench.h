// The one-process kernel reference of `engramlab bench` (docs/design.md section
// 8): the lookup kernels timed straight, with no runtime around them, on one
// GPU of this process. A table of V4.1 rows filled on that GPU (one plain
// device buffer, every row local: no shard set-up; shards across processes
// are the runtime's, core/exchange), and for each tokens-per-rank size, one
// lookup per captured CUDA graph, event-timed over the caller's draws of ids:
//   collective: NCCL all-gather ids -> zero-fill -> gather_owned -> NCCL
//               reduce-scatter (sum, bf16), a one-member communicator;
//   peer:       gather_peer over the one shard;
//   plain:      a warp-per-row raw copy, no dequantisation;
//   local copy: the lookup's row bytes streamed from this GPU's HBM;
//   peer copy:  the same bytes streamed from another GPU over NVLink (when
//               the caller names one this process sees).
// The outputs are then checked: peer == collective bitwise (NaN as one
// value) and a sample of slots against the CPU rule. The runtime's figures
// on real processes are held against these (operator_checks/bench_rank.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "operator_checks/bench_stats.h"

namespace engram::operator_checks {

struct LookupBenchOptions {
  int gpu = 0;                         // the GPU timed (a rank's own)
  int peer_gpu = -1;                   // source of the NVLink copy; -1: not measured
  uint64_t table_bytes = 8ull << 30;   // rows = floor(table_bytes / row_bytes)
  std::vector<int64_t> tokens_per_rank{1, 16, 64, 256, 1024, 8192};
  int heads = 24;
  int dim = 256;                       // FP8 E4M3 values per row, + dim/32 UE8M0 scales
  int replays = 200;                   // timed, after `warmup_replays`
  int warmup_replays = 20;
  bool cold_l2 = false;                // read a 4 x L2 buffer before each replay
  // The ids looked up: draw `draw` (0 .. id_draws - 1) at `tokens`, tokens x
  // heads of them (DEAD, out-of-table and negative ids give zero rows). The
  // replays of a lookup path spread over the draws and pool; the caller's
  // runtime figures are timed over the same draws (operator_checks/bench_rank.h).
  std::function<std::vector<int64_t>(int64_t tokens, int draw)> ids;
  int id_draws = 1;                    // 1 to replays
  uint64_t seed = 2024;                // of the table's fill
  bool sweep_variants = false;         // also time every compiled peer kernel variant (kernels/gather_peer_variants.h)
};

struct VariantTiming {
  std::string name;                    // peer_variant_name
  LatencyPercentiles latency;
};

struct LookupBenchPoint {
  int64_t tokens_per_rank = 0;
  uint64_t ids_fingerprint = 0;        // every draw's ids folded in draw order from `tokens`, as
                                       // operator_checks::id_draws_fingerprint folds them
  LatencyPercentiles collective;
  LatencyPercentiles peer;
  LatencyPercentiles plain;            // a warp per row, raw bytes, no dequantisation (operator_checks::plain_gather)
  LatencyPercentiles local_copy;
  LatencyPercentiles peer_copy;
  bool peer_copy_ran = false;
  uint64_t read_bytes = 0;             // slots x row_bytes
  uint64_t write_bytes = 0;            // slots x dim x 2
  bool collective_ran = false;         // false when NCCL is missing
  bool collective_as_graph = false;
  uint64_t slots_checked_against_cpu = 0;
  std::string peer_variant;              // the kernel variant gather_peer ran
  std::vector<VariantTiming> variants;   // with sweep_variants: every variant, each checked == peer bitwise
};

struct LookupBenchReport {
  int gpu = 0;
  int peer_gpu = -1;
  std::string device_name;
  int64_t table_rows = 0;
  uint64_t row_bytes = 0;
  std::vector<LookupBenchPoint> points;
  // The method's fixed cost, timed like the lookups: the two events with
  // nothing between, a graph with no node, and a graph of one empty kernel.
  LatencyPercentiles events_only;
  LatencyPercentiles empty_graph;
  bool empty_graph_ran = false;
  LatencyPercentiles empty_kernel_graph;
  std::vector<std::string> notes;  // fallbacks taken, e.g. NCCL missing, no NVLink copy
};

// `log` receives progress lines (may be empty). Errors: kFailedPrecondition
// (no GPU), kResourceExhausted (the table does not fit), kInvalidArgument
// (options), kInternal (a CUDA call failed, naming it and the GPU; or a
// lookup disagreed, naming the first differing slot).
Result<LookupBenchReport> run_lookup_bench(const LookupBenchOptions& options,
                                           const std::function<void(std::string_view)>& log);

}  // namespace engram::operator_checks
