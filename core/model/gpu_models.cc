#include "core/model/gpu_models.h"
#include "core/base/text_excerpt.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>

#include "core/base/units.h"

namespace engram {
namespace {

// GPU memory: the CUDA total (cudaMemGetInfo), as PyTorch prints it in its
// out-of-memory message ("GPU 0 has a total capacity of 139.80 GiB"), read
// from published logs of each part on its usual system; H200's is also what
// our 2 x H200 machine reports. Stored in whole MiB (GiB figure x 1024,
// rounded). nvidia-smi shows more (H100 81,559 MiB, H200 143,771 MiB): the
// driver keeps the difference.
//
// Host memory: the system RAM of the reference system, divided by its GPUs:
// DGX H100 / H200 / B200 / B300 2 TB for 8 GPUs; a GB200 / GB300 NVL72
// compute tray 2 Grace CPUs x 480 GB LPDDR5X for 4 GPUs.
constexpr uint64_t kDgxHostPerGpu = 2'000'000'000'000ull / 8;
constexpr uint64_t kNvl72HostPerGpu = 960'000'000'000ull / 4;
constexpr const char* kDgx = "DGX system: 2 TB for 8 GPUs";
constexpr const char* kTray = "NVL72 compute tray: 2 Grace x 480 GB for 4 GPUs";

constexpr GpuModelInfo kModels[] = {
    {"H100", 81'050 * kMiB, "CUDA total 79.15 GiB on H100 80GB HBM3", kDgxHostPerGpu, kDgx},
    {"H200", 143'155 * kMiB, "CUDA total 139.80 GiB on H200 141GB HBM3e", kDgxHostPerGpu, kDgx},
    {"B200", 182'630 * kMiB, "CUDA total 178.35 GiB on B200 180GB HBM3e", kDgxHostPerGpu, kDgx},
    {"GB200", 188'733 * kMiB, "CUDA total 184.31 GiB on GB200 186GB HBM3e", kNvl72HostPerGpu, kTray},
    {"B300", 274'115 * kMiB, "CUDA total 267.69 GiB on Blackwell Ultra 288GB HBM3e", kDgxHostPerGpu, kDgx},
    {"GB300", 274'115 * kMiB, "CUDA total 267.69 GiB on Blackwell Ultra 288GB HBM3e", kNvl72HostPerGpu, kTray},
};

bool same_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

Result<GpuModelInfo> find_gpu_model(std::string_view gpu_model) {
  for (const GpuModelInfo& m : kModels)
    if (same_ignoring_case(gpu_model, m.name)) return m;
  return invalid_argument(fmt::format("gpu_model: unknown GPU model '{}'; known: {} (any case); for another GPU "
                                      "give its gpu_memory and host_memory",
                                      excerpt(gpu_model), fmt::join(known_gpu_models(), ", ")));
}

Result<uint64_t> default_gpu_memory_bytes(std::string_view gpu_model) {
  ENGRAM_ASSIGN_OR_RETURN(GpuModelInfo m, find_gpu_model(gpu_model));
  return m.memory_bytes;
}

std::vector<std::string> known_gpu_models() {
  std::vector<std::string> names;
  for (const GpuModelInfo& m : kModels) names.emplace_back(m.name);
  return names;
}

}  // namespace engram
