// The step model's constants (core/placements/step_cost.h): H200's, fitted
// on the one-H200 figures of docs/calibration_1xh200.csv (its rows cite the
// perf-notes lines they come from) plus, for the NVLink terms one GPU cannot
// show, the first 2 x H200 anchors of docs/design.md section 8 (an earlier
// machine and run); judged on docs/bench_2xh200.txt and
// docs/host_read_probe*_2xh200.txt (tests/step_cost_test.cc). `engramlab
// plan --calibration docs/calibration_1xh200.csv` re-fits them and prints
// the same figures; tests/step_cost_test.cc holds these to that fit.
#include <cctype>
#include <string>

#include "core/placements/step_cost.h"

namespace engram {
namespace {

bool same_name(const std::string& a, const char* b) {
  const std::string bs(b);
  if (a.size() != bs.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(bs[i]))) return false;
  return true;
}

struct VendorFacts {
  const char* name;
  GpuLinkFacts facts;
};

// Vendor figures: HBM bandwidth, NVLink bandwidth per direction (half the
// "total" NVIDIA quotes), NVLink-C2C per direction. Product pages and data
// sheets: H100 SXM 3.35 TB/s, NVLink 900 GB/s; H200 4.8 TB/s, NVLink
// 900 GB/s; H20 4.0 TB/s, NVLink 900 GB/s; B200 and B300 8 TB/s, NVLink 5
// 1.8 TB/s; GB200 / GB300 8 TB/s per GPU, NVLink 5 1.8 TB/s, NVLink-C2C
// 900 GB/s between the Grace CPU and its GPUs.
constexpr VendorFacts kVendor[] = {
    {"H20", {4000, 450, 0, "NVIDIA H20 data sheet: HBM3 4.0 TB/s, NVLink 900 GB/s"}},
    {"H100", {3350, 450, 0, "NVIDIA H100 SXM data sheet: HBM3 3.35 TB/s, NVLink 900 GB/s"}},
    {"H200", {4800, 450, 0, "NVIDIA H200 SXM data sheet: HBM3e 4.8 TB/s, NVLink 900 GB/s"}},
    {"B200", {8000, 900, 0, "NVIDIA DGX B200 data sheet: HBM3e 8 TB/s per GPU, NVLink 5 1.8 TB/s"}},
    {"GB200", {8000, 900, 450, "NVIDIA GB200 NVL72 data sheet: HBM3e 8 TB/s per GPU, NVLink 5 1.8 TB/s, C2C 900 GB/s"}},
    {"B300", {8000, 900, 0, "NVIDIA Blackwell Ultra (B300) data sheet: HBM3e 8 TB/s, NVLink 5 1.8 TB/s"}},
    {"GB300", {8000, 900, 450, "NVIDIA GB300 NVL72 data sheet: HBM3e 8 TB/s per GPU, NVLink 5 1.8 TB/s, C2C 900 GB/s"}},
};

// H200, calibrated: the output of `plan --calibration docs/calibration_1xh200.csv`.
StepConstants h200() {
  StepConstants c;
  c.gpu_model = "H200";
  c.calibration = "built-in: fitted on docs/calibration_1xh200.csv";
  c.graph_us = 0.8402;
  c.node_us = 2.528;
  c.gather_chain_us = 0.001108;
  c.hbm_gather_gbps = 2783;
  c.hbm_copy_gbps = 5023;
  c.nvlink_rtt_us = 2.528;
  c.nvlink_bus_gbps = 228.7;
  c.host_latency_us = 2.267;
  c.host_miss_ns = 34.45;
  c.host_miss_half_rows = 26560;
  c.stager_fixed_us = 114.7;
  c.stager_reserved_cores = 8.284;
  c.nvlink_gbps = 450;
  c.c2c_gbps = 0;
  c.pcie_gbps = 55.3;
  c.network_gbps = 50;
  c.cpu_gather_gbps_per_thread = 1.34;
  c.host_cores = 16;
  c.iommu_translated = true;
  return c;
}

}  // namespace

GpuLinkFacts gpu_link_facts(const std::string& gpu_model) {
  for (const VendorFacts& v : kVendor)
    if (same_name(gpu_model, v.name)) return v.facts;
  return kVendor[2].facts;  // H200's, for a GPU file's model (it may give its own)
}

StepConstants step_constants_for(const std::string& gpu_model) {
  StepConstants c = h200();
  const GpuLinkFacts base = gpu_link_facts("H200");
  const GpuLinkFacts f = gpu_link_facts(gpu_model);
  if (same_name(gpu_model, "H200")) return c;
  // Another part: its bandwidth terms scaled by the vendor's ratio to
  // H200's, its latencies kept (not measured there).
  const double hbm = f.hbm_gbps / base.hbm_gbps, nvlink = f.nvlink_gbps / base.nvlink_gbps;
  c.gpu_model = gpu_model;
  c.calibration = "built-in: H200's calibration scaled by the vendor bandwidths (" + std::string(f.source) + ")";
  c.hbm_gather_gbps *= hbm;
  c.hbm_copy_gbps *= hbm;
  c.nvlink_gbps = f.nvlink_gbps;
  c.nvlink_bus_gbps *= nvlink;
  c.c2c_gbps = f.c2c_gbps;
  return c;
}

const std::vector<StepConstantField>& step_constant_fields() {
  static const std::vector<StepConstantField> kFields = {
      {"graph_us", "us", true, "fitted: one-H200 gather and collective graphs", &StepConstants::graph_us},
      {"node_us", "us", true, "fitted: the collective path's four nodes against the gather's one (one H200)",
       &StepConstants::node_us},
      {"gather_chain_us", "us", true, "fitted: one-H200 gathers at 1..1024 tokens", &StepConstants::gather_chain_us},
      {"hbm_gather_gbps", "GB/s", true, "fitted: one-H200 gathers over the 94.4 GiB table", &StepConstants::hbm_gather_gbps},
      {"hbm_copy_gbps", "GB/s", true, "fitted: the one-member NCCL path at 8,192 tokens (one H200)",
       &StepConstants::hbm_copy_gbps},
      {"nvlink_rtt_us", "us", true, "fitted: docs/design.md section 8, plain peer-gather kernel (2 x H200, first run)",
       &StepConstants::nvlink_rtt_us},
      {"nvlink_bus_gbps", "GB/s", true, "fitted: docs/design.md section 8, collective path DP=2 (2 x H200, first run)",
       &StepConstants::nvlink_bus_gbps},
      {"host_latency_us", "us", true, "fitted: one-H200 host reads, docs/perf_notes.md lines 639-645",
       &StepConstants::host_latency_us},
      {"host_miss_ns", "ns", true, "fitted: one-H200 host reads, docs/perf_notes.md lines 639-645",
       &StepConstants::host_miss_ns},
      {"host_miss_half_rows", "rows", true, "fitted: one-H200 host reads, docs/perf_notes.md lines 639-645",
       &StepConstants::host_miss_half_rows},
      {"stager_fixed_us", "us", true, "fitted: one-H200 stager, docs/perf_notes.md lines 496-501",
       &StepConstants::stager_fixed_us},
      {"stager_reserved_cores", "cores", true, "fitted: one-H200 stager, docs/perf_notes.md lines 496-501",
       &StepConstants::stager_reserved_cores},
      {"nvlink_gbps", "GB/s", false, "vendor: NVLink 4 900 GB/s total, 450 per direction (H200 data sheet)",
       &StepConstants::nvlink_gbps},
      {"c2c_gbps", "GB/s", false, "vendor: NVLink-C2C 900 GB/s total (GH200/GB200 data sheets); none on H200",
       &StepConstants::c2c_gbps},
      {"pcie_gbps", "GB/s", false, "measured: pinned copy 55.3 GB/s, docs/perf_notes.md line 652",
       &StepConstants::pcie_gbps},
      {"network_gbps", "GB/s", false, "vendor: one ConnectX-7 400 Gb/s NIC per GPU (DGX H200)",
       &StepConstants::network_gbps},
      {"cpu_gather_gbps_per_thread", "GB/s", false,
       "measured: CPU gather 21.5 GB/s from 16 threads, docs/perf_notes.md line 503",
       &StepConstants::cpu_gather_gbps_per_thread},
  };
  return kFields;
}

}  // namespace engram
