// GPU models a deployment may name, with the memory CUDA reports for each,
// its VMM granularity, whether it can share memory over a multi-node NVLink
// fabric, and the host memory of the usual system built around it. Names
// match in any case ("gb200" is GB200). A GPU this table lacks is described
// by a GPU file (YAML, below) and named by its path.
//
// GPU memory is the total cudaMemGetInfo reports (what an engine can
// allocate from), not the marketing figure and not nvidia-smi's: H200 shows
// 143,771 MiB in nvidia-smi and is sold as 141 GB, but CUDA reports 139.80
// GiB. Write `gpu_memory` when a board differs (PCIe and NVL variants do).
//
// A GPU file:
//   name: L40S
//   memory: 44.4GiB                    # the CUDA total (cudaMemGetInfo)
//   memory_source: where that figure was measured
//   host_memory_per_gpu: 128GiB        # optional: the host's RAM / its GPUs
//   host_memory_source: ...
//   vmm_granularity: 2MiB              # optional, default 2 MiB
//   fabric: false                      # optional: FABRIC handles across hosts (NVL72 racks)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace engram {

struct GpuModelInfo {
  std::string name;                    // canonical spelling, e.g. "GB200"; a GPU file's name: field
  uint64_t memory_bytes = 0;           // cudaMemGetInfo total
  std::string memory_source;           // where that figure comes from, for the output
  uint64_t host_memory_bytes_per_gpu = 0;  // system RAM of the usual host / its GPUs
  std::string host_memory_source;
  uint64_t vmm_granularity_bytes = 0;  // cuMemGetAllocationGranularity (minimum)
  bool fabric = false;                 // multi-node NVLink: FABRIC handles across hosts of one domain
  std::string source_path;             // the GPU file ("" for a built-in model)
};

// A path rather than a model name: holds a '/' or ends in .yaml / .yml.
bool names_a_gpu_file(std::string_view gpu_model);

// Case-insensitive name, or the path of a GPU file (ends in .yaml/.yml or
// holds a '/'); anything else is an invalid_argument error naming the known
// ones and the file form. A GPU file is read (once per call: callers keep
// the result rather than ask again).
Result<GpuModelInfo> find_gpu_model(std::string_view gpu_model);
Result<uint64_t> default_gpu_memory_bytes(std::string_view gpu_model);
std::vector<std::string> known_gpu_models();
// Parses a GPU file's text; `source` names it in errors.
Result<GpuModelInfo> parse_gpu_file(std::string_view text, std::string_view source);

// The GPU model CUDA's device name stands for: its first word after
// "NVIDIA " ("NVIDIA H100 80GB HBM3" -> "H100", "NVIDIA GB200" -> "GB200"),
// spelt as the built-in table spells it where it is one ("h200" -> "H200").
// Variants (PCIe, NVL boards) share their part's name: their memory differs,
// which gpu_memory says. Empty for an empty name.
std::string gpu_model_of_device_name(std::string_view device_name);
// Whether `name` is one of the built-in models (any case).
bool is_builtin_gpu_model(std::string_view name);
// Two names of one model: GPU model names match in any case.
bool same_gpu_model_name(std::string_view a, std::string_view b);

// VMM allocation granularity: 2 MiB on every Hopper and Blackwell part.
inline constexpr uint64_t kVmmGranularityBytes = 2ull * 1024 * 1024;

}  // namespace engram
