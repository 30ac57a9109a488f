#include "core/model/gpu_models.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/base/units.h"

namespace engram {
namespace {
struct GpuModel {
  const char* name;
  uint64_t memory_bytes;
};
constexpr GpuModel kModels[] = {
    {"H100", 80 * kGiB},   {"H200", 143'771 * kMiB}, {"B200", 180 * kGiB},
    {"GB200", 186 * kGiB}, {"B300", 270 * kGiB},     {"GB300", 279 * kGiB},
};
}  // namespace

Result<uint64_t> default_gpu_memory_bytes(std::string_view gpu_model) {
  for (const GpuModel& m : kModels)
    if (gpu_model == m.name) return m.memory_bytes;
  return invalid_argument(fmt::format("gpu_model: unknown GPU model '{}'; known: {}", gpu_model,
                                      fmt::join(known_gpu_models(), ", ")));
}

std::vector<std::string> known_gpu_models() {
  std::vector<std::string> names;
  for (const GpuModel& m : kModels) names.emplace_back(m.name);
  return names;
}

}  // namespace engram
