// GPU models a deployment may name, with the memory CUDA reports for each and
// the host memory of the usual system built around it. Names match in any
// case ("gb200" is GB200).
//
// GPU memory is the total cudaMemGetInfo reports (what an engine can
// allocate from), not the marketing figure and not nvidia-smi's: H200 shows
// 143,771 MiB in nvidia-smi and is sold as 141 GB, but CUDA reports 139.80
// GiB. Write `gpu_memory` when a board differs (PCIe and NVL variants do).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace engram {

struct GpuModelInfo {
  const char* name;                    // canonical spelling, e.g. "GB200"
  uint64_t memory_bytes;               // cudaMemGetInfo total
  const char* memory_source;           // where that figure comes from, for the output
  uint64_t host_memory_bytes_per_gpu;  // system RAM of the usual host / its GPUs
  const char* host_memory_source;
};

// Case-insensitive; unknown models are an invalid_argument error naming the
// known ones.
Result<GpuModelInfo> find_gpu_model(std::string_view gpu_model);
Result<uint64_t> default_gpu_memory_bytes(std::string_view gpu_model);
std::vector<std::string> known_gpu_models();

// VMM allocation granularity: 2 MiB on every Hopper and Blackwell part.
inline constexpr uint64_t kVmmGranularityBytes = 2ull * 1024 * 1024;

}  // namespace engram
