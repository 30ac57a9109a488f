// The lookup benchmark on this process's GPUs (DESIGN.md section 8): one
// table of V4.1 rows sharded over every GPU in POSIX-fd VMM memory, each
// shard mapped by every GPU, DP = number of GPUs. For each tokens-per-rank
// size it times, as one lookup per captured CUDA graph launched on every GPU
// together and event-timed on GPU 0:
//   collective: NCCL all-gather ids -> zero-fill [dp x tokens x heads x dim]
//               -> gather_owned -> NCCL reduce-scatter (sum, bf16);
//   peer:       gather_peer straight from the owning shards;
//   local copy / peer copy: the same bytes moved as plain streams from the
//               own / the next GPU's shard (the copy floor's bandwidths).
// GPU 0's outputs are then checked: peer == collective bitwise (NaN as one
// value) and a sample of slots against the CPU rule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/report/bench_stats.h"
#include "core/base/status.h"

namespace engram::cuda {

struct LookupBenchOptions {
  uint64_t shard_bytes = 8ull << 30;   // per GPU; rows = gpus * floor(shard_bytes / row_bytes)
  std::vector<int64_t> tokens_per_rank{1, 16, 64, 256, 1024, 8192};
  int heads = 24;
  int dim = 256;                       // FP8 E4M3 values per row, + dim/32 UE8M0 scales
  int replays = 200;                   // timed, after `warmup_replays`
  int warmup_replays = 20;
  bool cold_l2 = false;                // read a 2 x L2 buffer on every GPU before each replay
  double dead_fraction = 0.01;
  uint64_t seed = 2024;
  int gpus = 0;                        // 0: every GPU this process sees
  bool sweep_variants = false;         // also time every compiled peer kernel variant (kernels/gather_peer_variants.h)
};

struct VariantTiming {
  std::string name;                    // peer_variant_name
  LatencyPercentiles latency;
};

struct LookupBenchPoint {
  int64_t tokens_per_rank = 0;
  LatencyPercentiles collective;
  LatencyPercentiles peer;
  LatencyPercentiles local_copy;
  LatencyPercentiles peer_copy;
  // The reference: a plain warp-per-row kernel over the same ids and
  // shards, raw bytes, no dequantisation (kernels::plain_gather).
  LatencyPercentiles plain;
  bool plain_ran = false;      // false past kernels::PlainGatherArgs::kMaxShards GPUs
  uint64_t read_bytes = 0;     // slots x row_bytes
  uint64_t write_bytes = 0;    // slots x dim x 2
  double remote_fraction = 0;  // of GPU 0's slots
  double local_fraction = 0;
  double floor_us = 0;
  bool collective_ran = false;     // false when NCCL is missing
  bool collective_as_graph = false;
  uint64_t slots_checked_against_cpu = 0;
  std::string peer_variant;              // the kernel variant gather_peer ran
  std::vector<VariantTiming> variants;   // with sweep_variants: every variant, each checked == peer bitwise
};

struct LookupBenchReport {
  int gpus = 0;
  std::string device_name;
  int64_t table_rows = 0;
  uint64_t row_bytes = 0;
  uint64_t shard_bytes = 0;        // per GPU, as allocated (granularity-rounded)
  std::vector<LookupBenchPoint> points;
  // The method's fixed cost, timed like the lookups (a graph per GPU, all
  // launched together, event-timed on GPU 0): the two events with nothing
  // between, a graph with no node, and a graph of one empty kernel.
  LatencyPercentiles events_only;
  LatencyPercentiles empty_graph;
  bool empty_graph_ran = false;
  LatencyPercentiles empty_kernel_graph;
  std::vector<std::string> notes;  // fallbacks taken, e.g. NCCL missing or eager collective
};

// `log` receives progress lines (may be empty). Errors: kFailedPrecondition
// (no GPU, no P2P between two GPUs), kResourceExhausted (shards do not fit),
// kInvalidArgument (options), kInternal (a CUDA call failed, naming it and
// the GPU; or a lookup disagreed, naming the first differing slot).
Result<LookupBenchReport> run_lookup_bench(const LookupBenchOptions& options,
                                           const std::function<void(std::string_view)>& log);

}  // namespace engram::cuda
