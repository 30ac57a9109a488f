// The time of one Engram lookup step of one layer on one rank: the rows and
// bytes a placement moves over each link, the collectives it runs and the
// fixed cost of launching it, priced from a GPU model's constants
// (StepConstants). Each placement brings its own step_time hook in its ops
// table (core/placements/placement.h) built from the pieces below; nothing
// here switches over placements. The constants and where each one was
// measured or published are in step_constants.cc; the fit that calibrates
// them from a bench run is core/plan/step_calibration.h.
//
// What the model times is what `bench` times: one lookup per replayed CUDA
// graph, the rank's median (p50), tokens drawn fresh (decode steps), a
// table far larger than any cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engram {

// Where bytes travel.
enum class LinkKind : uint8_t {
  kHbm,        // the GPU's own memory
  kNvlink,     // GPU to GPU inside one NVLink domain
  kNvlinkC2c,  // GPU to its Grace CPU's memory (GH200, GB200, GB300)
  kPcie,       // GPU to host memory or GPU to GPU without NVLink
  kNetwork,    // between hosts outside one NVLink domain
};
const char* link_kind_name(LinkKind link);

enum class CollectiveKind : uint8_t { kAllGather, kReduceScatter, kAllReduce, kAllToAll };
const char* collective_kind_name(CollectiveKind kind);

// The constants of one GPU model's step model. "fitted" constants come from
// a calibration (bench points); "fact" constants are vendor figures or
// machine ceilings (step_constants.cc cites each).
struct StepConstants {
  std::string gpu_model = "H200";
  std::string calibration;  // which calibration set them ("built-in: docs/calibration_1xh200.csv", or a file)
  // fitted
  double graph_us = 0;             // a replayed graph with its events, nothing in it
  double node_us = 0;              // each kernel or collective node a graph holds
  double gather_chain_us = 0;      // the dependent id -> row load chain of a gather kernel
  double hbm_gather_gbps = 0;      // a warp-per-row gather: rows read + bf16 rows written, HBM
  double hbm_copy_gbps = 0;        // memset and copies, HBM (read + write bytes)
  double nvlink_rtt_us = 0;        // a remote row read's extra round trip over NVLink
  double nvlink_bus_gbps = 0;      // a ring collective's bus bandwidth over NVLink (NCCL's busBw)
  double host_latency_us = 0;      // a kernel's first host row over PCIe/UVA
  double host_miss_ns = 0;         // an IOMMU translation miss per row, at saturation
  double host_miss_half_rows = 0;  // rows per lookup at which half the rows miss the translation cache
  double stager_fixed_us = 0;      // the CPU stager's host-function round trips
  double stager_reserved_cores = 0;  // host cores the stager cannot use (the rank, the driver)
  // facts
  double nvlink_gbps = 0;          // NVLink per direction, vendor
  double c2c_gbps = 0;             // NVLink-C2C per direction (0: none), vendor
  double pcie_gbps = 0;            // pinned host-to-device copy (PCIe/UVA)
  double network_gbps = 0;         // per GPU between hosts (one 400 Gb/s NIC)
  double cpu_gather_gbps_per_thread = 0;  // one CPU thread gathering random rows of a large table
  int host_cores = 0;              // the host's cores per GPU machine (the stager's ceiling)
  bool iommu_translated = true;    // host reads go through IOMMU translation (the measured VMs)
};

// The built-in constants of a GPU model (any case): H200's calibrated ones,
// scaled by the vendor's bandwidth ratios for the other built-in models.
// An unknown model gets H200's, with its name.
StepConstants step_constants_for(const std::string& gpu_model);
// The vendor bandwidth figures behind that scaling (GB/s): HBM, NVLink per
// direction, NVLink-C2C per direction (0: none).
struct GpuLinkFacts {
  double hbm_gbps = 0;
  double nvlink_gbps = 0;
  double c2c_gbps = 0;
  const char* source = "";
};
GpuLinkFacts gpu_link_facts(const std::string& gpu_model);

// One name and value per constant, in StepConstants order, with whether a
// calibration fits it and where its default comes from. The fit and the
// report walk this list.
struct StepConstantField {
  const char* name;
  const char* unit;
  bool fitted;
  const char* source;
  double StepConstants::*member;
};
const std::vector<StepConstantField>& step_constant_fields();

// The engine's rules that change a step's time, gathered in one place
// (core/plan/engine_step_rules.h fills them from the engine profile).
struct EngineStepRules {
  // How a row-shard device lookup brings rows back (SGLang without DP
  // attention: all-reduce; with it, and engramlab: reduce-scatter).
  CollectiveKind row_shards_back = CollectiveKind::kReduceScatter;
  // How a head-sharded lookup brings each token's rows back to its rank
  // (engramlab: all-to-all; vLLM: all-gather over the Engram DP group).
  CollectiveKind head_shards_back = CollectiveKind::kAllToAll;
  // Collective buffers sized to the DP slot (tokens_per_rank_max), padding
  // rows included, instead of the step's tokens.
  bool pads_to_slot = false;
  // The lookup runs on a side stream ahead of its layer, behind the layers
  // before it: only its launch is on the critical path.
  bool side_stream_prefetch = false;
  std::string source;  // where the rules were read
};

// What one rank's step depends on.
struct StepCostInput {
  int tokens = 1;              // this rank's tokens in the step
  int tokens_slot = 1;         // the DP slot (pads_to_slot)
  int heads = 24;              // rows per token of the table
  uint64_t row_bytes = 264;    // a stored row
  uint64_t out_row_bytes = 512;  // a looked-up row as bf16
  uint64_t table_bytes = 0;
  int group_size = 1;          // the placement's group (shard group or node-local group)
  LinkKind group_link = LinkKind::kNvlink;
  int tp = 1;
  LinkKind tp_link = LinkKind::kNvlink;
  bool sequence_parallel = false;
  LinkKind host_link = LinkKind::kPcie;  // how the GPU reaches host tables
  // The runtime's host lookup (backends/cuda/cuda_device_compute.h): the
  // CPU stager from this many rows, its threads and the share of rows the
  // kernel still reads itself.
  int64_t staged_rows_min = 16384;
  int stager_threads = 8;
  double stager_direct_fraction = 0.4;
  EngineStepRules rules;
  // A slower link or GPU (the emulator's `slow` fault): every time over the
  // group's link, or every on-GPU time, multiplied by this.
  double slow_link_factor = 1.0;
  double slow_gpu_factor = 1.0;
};

struct StepTerm {
  std::string what;  // "all-gather ids", "host rows (IOMMU)", ...
  LinkKind link = LinkKind::kHbm;
  double us = 0;
};

struct StepTime {
  double total_us = 0;
  double exposed_us = 0;  // on the critical path
  double hidden_us = 0;   // behind the layers before (side-stream prefetch)
  std::vector<StepTerm> terms;
};

// The pieces placements build their step from (step_cost.cc).
class StepBuilder {
 public:
  StepBuilder(const StepCostInput& in, const StepConstants& c);
  // The graph's fixed cost.
  void launch();
  // A gather kernel over local HBM: rows read, bf16 rows written.
  void local_gather(const char* what, double rows_read, double rows_written);
  // A gather kernel reading rows spread evenly over `group` GPUs' shards.
  void peer_gather(const char* what, double rows, int group);
  // A memset or copy of `bytes` (read + write counted by the caller).
  void hbm_copy(const char* what, double bytes);
  // A collective over `group` ranks on `link`; `bytes` is NCCL's nBytes
  // (the whole gathered or scattered buffer).
  void collective(const char* what, CollectiveKind kind, int group, LinkKind link, double bytes);
  // A host table read of `rows` rows by the runtime's path: the kernel
  // reading host memory itself, or the CPU stager from staged_rows_min rows.
  void host_rows(double rows);
  // A host table the GPU cannot address (a file mapping, unpinned): the CPU
  // gathers every row and copies them.
  void cpu_rows(double rows);
  // The TP ranks' head slices assembled (host placements at TP > 1).
  void tp_assembly();
  StepTime finish() const;

  const StepCostInput& in;
  const StepConstants& c;

 private:
  double link_factor(LinkKind link) const;
  void add(std::string what, LinkKind link, double us);
  StepTime t_;
};

// The time of a direct host read of `rows` rows (the kernel), no launch.
double host_read_us(double rows, double row_bytes, const StepConstants& c, LinkKind host_link);
// A ring collective's time (NCCL's model: latency per protocol + bytes over
// its bandwidth, the faster protocol taken), no launch.
// The ids a collective lookup all-gathers over `group` ranks (int64s; the
// DP slot's where the engine pads to it).
double step_ids_bytes(const StepCostInput& in, int group);
double collective_us(CollectiveKind kind, int group, LinkKind link, double bytes, const StepConstants& c);

}  // namespace engram
