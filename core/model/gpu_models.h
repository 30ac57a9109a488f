// GPU models a deployment may name, with the memory each reports. The sizes
// are approximate (what nvidia-smi shows on common SKUs; board variants
// differ): write `gpu_memory` explicitly when the exact figure matters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace engram {

// H100 80 GiB, H200 141 GiB (143,771 MiB), B200 180 GiB, GB200 186 GiB,
// B300 270 GiB, GB300 279 GiB. Unknown models are an invalid_argument error.
Result<uint64_t> default_gpu_memory_bytes(std::string_view gpu_model);
std::vector<std::string> known_gpu_models();

// VMM allocation granularity: 2 MiB on every Hopper and Blackwell part.
inline constexpr uint64_t kVmmGranularityBytes = 2ull * 1024 * 1024;

}  // namespace engram
