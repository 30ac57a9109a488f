#include "core/placements/step_cost.h"

#include <algorithm>
#include <cmath>

#include "core/base/check.h"

namespace engram {
namespace {

// Global memory is read in 128-byte lines (CUDA C++ Best Practices Guide,
// "Coalesced Access to Global Memory"); a 264-byte row spans three of them
// wherever it starts, so a remote or host row costs three lines on the link
// (docs/perf_notes.md lines 66-72 measured the request cost).
constexpr double kLineBytes = 128;
double line_bytes_of_row(double row_bytes) { return std::ceil(row_bytes / kLineBytes) * kLineBytes; }

constexpr double kIdBytes = 8;  // int64 row ids

// NCCL's ring model (NVIDIA/nccl src/graph/tuning.cc at 01afd20: baseLat,
// hwLat, and the LL protocol's bandwidth at a third of the bus): latency per
// protocol plus bytes over the algorithm bandwidth, the faster protocol
// taken, as ncclTopoGetAlgoTime does.
struct Protocol {
  double base_us;
  double nvlink_step_us, pcie_step_us, network_step_us;
  double bandwidth_share;
};
constexpr Protocol kLl{3.6, 0.47, 1.0, 2.7, 1.0 / 3.0};
constexpr Protocol kSimple{8.4, 3.4, 5.7, 9.6, 1.0};

double bus_gbps(LinkKind link, const StepConstants& c) {
  switch (link) {
    case LinkKind::kNvlink: return c.nvlink_bus_gbps;
    case LinkKind::kPcie: return c.pcie_gbps;
    case LinkKind::kNetwork: return c.network_gbps;
    case LinkKind::kNvlinkC2c: return c.c2c_gbps > 0 ? c.c2c_gbps : c.pcie_gbps;
    case LinkKind::kHbm: return c.hbm_copy_gbps / 2;
  }
  return c.pcie_gbps;
}

double step_latency_us(const Protocol& p, LinkKind link) {
  switch (link) {
    case LinkKind::kNvlink:
    case LinkKind::kNvlinkC2c:
    case LinkKind::kHbm: return p.nvlink_step_us;
    case LinkKind::kPcie: return p.pcie_step_us;
    case LinkKind::kNetwork: return p.network_step_us;
  }
  return p.pcie_step_us;
}

// The CPU threads' gather rate: their ceiling (threads x the rate of one,
// as the machine measured it at that count) on the cores left to them
// beside the rank and the driver.
double stager_cpu_gbps(const StepCostInput& in, const StepConstants& c) {
  const double threads = std::max(1, in.stager_threads);
  const double running = std::min(threads, static_cast<double>(std::max(1, c.host_cores)));
  const double usable = std::max(1.0, c.host_cores - c.stager_reserved_cores);
  return c.cpu_gather_gbps_per_thread * threads * std::min(1.0, usable / running);
}

}  // namespace

const char* link_kind_name(LinkKind link) {
  switch (link) {
    case LinkKind::kHbm: return "HBM";
    case LinkKind::kNvlink: return "NVLink";
    case LinkKind::kNvlinkC2c: return "NVLink-C2C";
    case LinkKind::kPcie: return "PCIe";
    case LinkKind::kNetwork: return "network";
  }
  return "?";
}

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all-gather";
    case CollectiveKind::kReduceScatter: return "reduce-scatter";
    case CollectiveKind::kAllReduce: return "all-reduce";
    case CollectiveKind::kAllToAll: return "all-to-all";
  }
  return "?";
}

double collective_us(CollectiveKind kind, int group, LinkKind link, double bytes, const StepConstants& c) {
  ENGRAM_CHECK(group >= 1 && bytes >= 0);
  if (group == 1) return 0;  // NCCL with one rank: a local copy, priced by the caller where it matters
  // Ring steps and the share of the buffer each rank puts on the link
  // (NCCL: nsteps; bandwidth ratio nRanks / nsteps). An all-to-all sends
  // (g-1)/g of its buffer once, point to point.
  const double g = group;
  double steps = g - 1, bytes_on_bus = bytes * (g - 1) / g;
  if (kind == CollectiveKind::kAllReduce) {
    steps = 2 * (g - 1);
    bytes_on_bus = 2 * bytes * (g - 1) / g;
  }
  double best = 0;
  bool first = true;
  for (const Protocol& p : {kLl, kSimple}) {
    const double gbps = bus_gbps(link, c) * p.bandwidth_share;
    ENGRAM_CHECK_MSG(gbps > 0, "a collective over a link without a bandwidth");
    const double latency = p.base_us + (kind == CollectiveKind::kAllToAll ? 1 : steps) * step_latency_us(p, link);
    const double t = latency + bytes_on_bus / (gbps * 1e3);
    if (first || t < best) best = t;
    first = false;
  }
  return best;
}

double host_read_us(double rows, double row_bytes, const StepConstants& c, LinkKind host_link) {
  if (rows <= 0) return 0;
  const double link_gbps = host_link == LinkKind::kNvlinkC2c && c.c2c_gbps > 0 ? c.c2c_gbps : c.pcie_gbps;
  const double per_row_us = line_bytes_of_row(row_bytes) / (link_gbps * 1e3);
  // IOMMU translation: a random row of a large table misses the translation
  // cache more often the more rows a lookup touches (docs/perf_notes.md
  // lines 146-167: 33 GB/s at 256 tokens down to 7.45 GB/s at 8,192).
  const double miss_us = c.iommu_translated && host_link == LinkKind::kPcie
                             ? c.host_miss_ns / 1e3 * rows / (rows + c.host_miss_half_rows)
                             : 0;
  return c.host_latency_us + rows * (per_row_us + miss_us);
}

StepBuilder::StepBuilder(const StepCostInput& input, const StepConstants& constants) : in(input), c(constants) {
  ENGRAM_CHECK(in.tokens >= 0 && in.heads >= 1 && in.group_size >= 1 && in.tp >= 1);
  ENGRAM_CHECK(in.slow_link_factor >= 1 && in.slow_gpu_factor >= 1);
}

double StepBuilder::link_factor(LinkKind link) const {
  return link == LinkKind::kHbm ? in.slow_gpu_factor : in.slow_link_factor;
}

void StepBuilder::add(std::string what, LinkKind link, double us) {
  ENGRAM_CHECK_MSG(us >= 0 && std::isfinite(us), "a step term is a finite, non-negative time");
  t_.terms.push_back({std::move(what), link, us * link_factor(link)});
}

void StepBuilder::launch() { add("launch (graph)", LinkKind::kHbm, c.graph_us); }

void StepBuilder::local_gather(const char* what, double rows_read, double rows_written) {
  const double bytes = rows_read * static_cast<double>(in.row_bytes) + rows_written * static_cast<double>(in.out_row_bytes);
  add(what, LinkKind::kHbm, c.node_us + c.gather_chain_us + bytes / (c.hbm_gather_gbps * 1e3));
}

void StepBuilder::peer_gather(const char* what, double rows, int group) {
  const double remote = rows * (group - 1) / group, local = rows - remote;
  const double on_gpu =
      c.node_us + c.gather_chain_us +
      (local * static_cast<double>(in.row_bytes) + rows * static_cast<double>(in.out_row_bytes)) /
          (c.hbm_gather_gbps * 1e3);
  if (group == 1) {
    add(what, LinkKind::kHbm, on_gpu);
    return;
  }
  const double link = in.group_link == LinkKind::kNvlink ? c.nvlink_gbps : bus_gbps(in.group_link, c);
  const double over_link = c.nvlink_rtt_us + remote * line_bytes_of_row(static_cast<double>(in.row_bytes)) /
                                                 (link * 1e3);
  // Local rows and the writes run beside the remote reads; the slower side sets the time.
  if (over_link * in.slow_link_factor >= on_gpu * in.slow_gpu_factor)
    add(std::string(what) + " (remote rows)", in.group_link, c.node_us + c.gather_chain_us + over_link);
  else
    add(what, LinkKind::kHbm, on_gpu);
}

void StepBuilder::hbm_copy(const char* what, double bytes) {
  add(what, LinkKind::kHbm, c.node_us + bytes / (c.hbm_copy_gbps * 1e3));
}

void StepBuilder::collective(const char* what, CollectiveKind kind, int group, LinkKind link, double bytes) {
  if (group < 2) return;
  add(std::string(what) + " (" + collective_kind_name(kind) + ")", link,
      c.node_us + collective_us(kind, group, link, bytes, c));
}

void StepBuilder::host_rows(double rows) {
  if (rows < static_cast<double>(in.staged_rows_min)) {
    add("host rows (kernel)", in.host_link, c.node_us + host_read_us(rows, static_cast<double>(in.row_bytes), c, in.host_link));
    return;
  }
  // The CPU stager (backends/cuda/host_row_stager.h): the kernel reads a
  // share itself while the CPU threads gather the rest into pinned memory;
  // the threads beyond the cores left to them share those cores.
  const double d = in.stager_direct_fraction;
  const double cpu_gbps = stager_cpu_gbps(in, c);
  const double cpu_us = (1 - d) * rows * static_cast<double>(in.row_bytes) / (cpu_gbps * 1e3);
  const double kernel_us = host_read_us(d * rows, static_cast<double>(in.row_bytes), c, in.host_link);
  add("host rows (CPU stager)", in.host_link, c.stager_fixed_us + std::max(cpu_us, kernel_us));
}

void StepBuilder::cpu_rows(double rows) {
  const double cpu_gbps = stager_cpu_gbps(in, c);
  const double bytes = rows * static_cast<double>(in.row_bytes);
  add("host rows (CPU gather, unpinned)", in.host_link,
      c.stager_fixed_us + bytes / (cpu_gbps * 1e3) + bytes / (c.pcie_gbps * 1e3));
}

void StepBuilder::tp_assembly() {
  if (in.tp < 2) return;
  const double bytes = static_cast<double>(in.tokens) * in.heads * static_cast<double>(in.out_row_bytes);
  collective("heads over TP",
             in.sequence_parallel ? CollectiveKind::kAllToAll : CollectiveKind::kAllGather, in.tp, in.tp_link, bytes);
}

StepTime StepBuilder::finish() const {
  StepTime t = t_;
  for (const StepTerm& term : t.terms) t.total_us += term.us;
  if (in.rules.side_stream_prefetch) {
    // Only the launch waits on the critical path; the rest runs behind the
    // layers before (as far as they last: the report says so).
    t.exposed_us = t.terms.empty() ? 0 : t.terms.front().us;
    t.hidden_us = t.total_us - t.exposed_us;
  } else {
    t.exposed_us = t.total_us;
  }
  return t;
}

double step_ids_bytes(const StepCostInput& in, int group) {
  const int tokens = in.rules.pads_to_slot ? std::max(in.tokens, in.tokens_slot) : in.tokens;
  return static_cast<double>(group) * tokens * in.heads * kIdBytes;
}

}  // namespace engram
