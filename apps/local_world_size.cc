#include "apps/local_world_size.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "apps/flag_numbers.h"

namespace engram::app {
namespace {

// GPUs the driver knows, whatever this process may use.
int driver_gpu_count() {
  std::error_code ec;
  int count = 0;
  for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec), end; !ec && it != end;
       it.increment(ec))
    ++count;
  if (count > 0) return count;
  // No /proc entries (some containers): ask nvidia-smi, when it is there.
  FILE* pipe = ::popen("nvidia-smi -L 2>/dev/null", "r");
  if (pipe == nullptr) return 0;
  char line[512];
  while (std::fgets(line, sizeof line, pipe) != nullptr)
    if (std::string_view(line).rfind("GPU ", 0) == 0) ++count;
  ::pclose(pipe);
  return count;
}

}  // namespace

int visible_gpu_count() {
  const int physical = driver_gpu_count();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return physical;
  const std::string_view list(visible);
  int count = 0;
  size_t at = 0;
  while (at < list.size()) {
    size_t comma = list.find(',', at);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view item = list.substr(at, comma - at);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int index = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), index);
    const bool by_index = ec == std::errc() && end == item.data() + item.size();
    const bool by_uuid = item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0;
    if (!(by_index ? index >= 0 && index < physical : by_uuid && physical > 0)) break;
    ++count;
    at = comma + 1;
  }
  return count;
}

Result<int> local_world_size(std::string_view text, std::string_view flag, int max_ranks) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const int cpu_count = cpus > 0 ? static_cast<int>(std::min<long>(cpus, max_ranks)) : 1;
  if (text == "cpu") return cpu_count;
  if (text == "gpu" || text == "auto") {
    const int gpus = visible_gpu_count();
    if (gpus > 0) return std::min(gpus, max_ranks);
    if (text == "auto") return cpu_count;
    return invalid_argument(fmt::format(
        "{} gpu: no GPU is visible to this process (none in /proc/driver/nvidia/gpus or `nvidia-smi -L`{}); give "
        "{} N, or {} auto (the CPU count when there is no GPU)",
        flag, std::getenv("CUDA_VISIBLE_DEVICES") != nullptr ? ", or CUDA_VISIBLE_DEVICES hides them" : "", flag,
        flag));
  }
  auto number = whole_number_flag<int>(flag, text, 1, max_ranks);
  if (!number.is_ok()) {
    return invalid_argument(number.status().message() + ", or gpu, auto or cpu (torchrun's words)");
  }
  return number;
}

}  // namespace engram::app
