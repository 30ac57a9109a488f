#include "core/model/gpu_models.h"
#include "core/base/text_excerpt.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>

#include "core/base/units.h"
#include "core/base/yaml_fields.h"

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
constexpr const char* kHgxH20 = "HGX H20 system: 2 TB for 8 GPUs (assumed, as the DGX H100 it derives from)";

struct BuiltIn {
  const char* name;
  uint64_t memory_bytes;
  const char* memory_source;
  uint64_t host_memory_bytes_per_gpu;
  const char* host_memory_source;
  bool fabric;  // NVL72 racks: FABRIC handles across the trays of one NVLink domain
};

constexpr BuiltIn kModels[] = {
    // H20 96GB: "CUDA-visible memory ~95.1 GiB" on an H20 96GB system
    // (RightNow-AI/AutoMegaKernel pull 3, its validation report).
    {"H20", 97'382 * kMiB, "CUDA total 95.1 GiB on H20 96GB HBM3", kDgxHostPerGpu, kHgxH20, false},
    {"H100", 81'050 * kMiB, "CUDA total 79.15 GiB on H100 80GB HBM3", kDgxHostPerGpu, kDgx, false},
    {"H200", 143'155 * kMiB, "CUDA total 139.80 GiB on H200 141GB HBM3e", kDgxHostPerGpu, kDgx, false},
    {"B200", 182'630 * kMiB, "CUDA total 178.35 GiB on B200 180GB HBM3e", kDgxHostPerGpu, kDgx, false},
    {"GB200", 188'733 * kMiB, "CUDA total 184.31 GiB on GB200 186GB HBM3e", kNvl72HostPerGpu, kTray, true},
    {"B300", 274'115 * kMiB, "CUDA total 267.69 GiB on Blackwell Ultra 288GB HBM3e", kDgxHostPerGpu, kDgx, false},
    {"GB300", 274'115 * kMiB, "CUDA total 267.69 GiB on Blackwell Ultra 288GB HBM3e", kNvl72HostPerGpu, kTray, true},
};

GpuModelInfo info_of(const BuiltIn& m) {
  return {m.name, m.memory_bytes, m.memory_source, m.host_memory_bytes_per_gpu, m.host_memory_source,
          kVmmGranularityBytes, m.fabric, ""};
}

constexpr const char* kGpuFileKeys[] = {"name", "memory", "memory_source", "host_memory_per_gpu",
                                        "host_memory_source", "vmm_granularity", "fabric"};

Result<uint64_t> size_at(const YamlFields& f, const YAML::Node& node, std::string_view path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string text, f.text(node, path));
  auto bytes = parse_bytes(text, path);
  if (!bytes.is_ok()) return f.error(node, path, bytes.status().message().substr(path.size() + 2));
  return bytes.value();
}

bool same_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

Result<GpuModelInfo> parse_gpu_file(std::string_view text, std::string_view source) {
  ENGRAM_ASSIGN_OR_RETURN(YAML::Node root, load_yaml_text(text, source));
  const YamlFields f(source);
  if (!root.IsMap())
    return f.error(root, "", fmt::format("expected a GPU file (a map with name and memory), found {}",
                                         YamlFields::describe(root)));
  ENGRAM_RETURN_IF_ERROR(f.check_keys(root, "", kGpuFileKeys));
  GpuModelInfo m;
  if (!root["name"]) return f.error(root, "name", "missing; write e.g. name: L40S");
  ENGRAM_ASSIGN_OR_RETURN(m.name, f.name(root["name"], "name", 64));
  if (!root["memory"]) return f.error(root, "memory", "missing; write the CUDA total (cudaMemGetInfo), e.g. memory: 44.4GiB");
  ENGRAM_ASSIGN_OR_RETURN(m.memory_bytes, size_at(f, root["memory"], "memory"));
  if (m.memory_bytes == 0 || m.memory_bytes > kMaxSizeBytes)
    return f.error(root["memory"], "memory", "must be more than 0B and at most 1 EiB; write the CUDA total");
  m.memory_source = fmt::format("from {}", source);
  if (root["memory_source"]) { ENGRAM_ASSIGN_OR_RETURN(m.memory_source, f.name(root["memory_source"], "memory_source", 512)); }
  if (root["host_memory_per_gpu"]) {
    ENGRAM_ASSIGN_OR_RETURN(m.host_memory_bytes_per_gpu, size_at(f, root["host_memory_per_gpu"], "host_memory_per_gpu"));
    if (m.host_memory_bytes_per_gpu > kMaxSizeBytes)
      return f.error(root["host_memory_per_gpu"], "host_memory_per_gpu", "more than 1 EiB");
    // 0 would read as "not known" downstream, and every table would pass the RAM fit.
    if (m.host_memory_bytes_per_gpu == 0)
      return f.error(root["host_memory_per_gpu"], "host_memory_per_gpu",
                     "0B: a host has some RAM; write its RAM divided by its GPUs (e.g. 128GiB), or leave the field "
                     "out if you do not know it");
  }
  m.host_memory_source = fmt::format("from {}", source);
  if (root["host_memory_source"]) {
    ENGRAM_ASSIGN_OR_RETURN(m.host_memory_source, f.name(root["host_memory_source"], "host_memory_source", 512));
  }
  m.vmm_granularity_bytes = kVmmGranularityBytes;
  if (root["vmm_granularity"]) {
    ENGRAM_ASSIGN_OR_RETURN(m.vmm_granularity_bytes, size_at(f, root["vmm_granularity"], "vmm_granularity"));
    const uint64_t g = m.vmm_granularity_bytes;
    if (g < 4096 || g > (uint64_t{1} << 30) || (g & (g - 1)) != 0)
      return f.error(root["vmm_granularity"], "vmm_granularity",
                     "must be a power of two from 4KiB to 1GiB (2MiB on Hopper and Blackwell)");
  }
  if (root["fabric"]) { ENGRAM_ASSIGN_OR_RETURN(m.fabric, f.boolean(root["fabric"], "fabric")); }
  return m;
}

bool names_a_gpu_file(std::string_view gpu_model) {
  return gpu_model.find('/') != std::string_view::npos || gpu_model.ends_with(".yaml") || gpu_model.ends_with(".yml");
}

Result<GpuModelInfo> find_gpu_model(std::string_view gpu_model) {
  if (names_a_gpu_file(gpu_model)) {
    const std::string path(gpu_model);
    ENGRAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "gpu_model file"));
    ENGRAM_ASSIGN_OR_RETURN(GpuModelInfo m, parse_gpu_file(text, path));
    m.source_path = path;
    return m;
  }
  for (const BuiltIn& m : kModels)
    if (same_ignoring_case(gpu_model, m.name)) return info_of(m);
  return invalid_argument(fmt::format("gpu_model: unknown GPU model '{}'; known: {} (any case); for another GPU "
                                      "give the path of a GPU file (core/model/gpu_models.h: name, memory, ...), or "
                                      "its gpu_memory and host_memory",
                                      excerpt(gpu_model), fmt::join(known_gpu_models(), ", ")));
}

Result<uint64_t> default_gpu_memory_bytes(std::string_view gpu_model) {
  ENGRAM_ASSIGN_OR_RETURN(GpuModelInfo m, find_gpu_model(gpu_model));
  return m.memory_bytes;
}

std::string gpu_model_of_device_name(std::string_view device_name) {
  std::string_view rest = device_name;
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  constexpr std::string_view kVendor = "NVIDIA ";
  if (rest.size() >= kVendor.size() && same_ignoring_case(rest.substr(0, kVendor.size()), kVendor))
    rest.remove_prefix(kVendor.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  const std::string_view word = rest.substr(0, rest.find(' '));
  for (const BuiltIn& m : kModels)
    if (same_ignoring_case(word, m.name)) return m.name;
  return std::string(word);
}

bool same_gpu_model_name(std::string_view a, std::string_view b) { return same_ignoring_case(a, b); }

bool is_builtin_gpu_model(std::string_view name) {
  for (const BuiltIn& m : kModels)
    if (same_ignoring_case(name, m.name)) return true;
  return false;
}

std::vector<std::string> known_gpu_models() {
  std::vector<std::string> names;
  for (const BuiltIn& m : kModels) names.emplace_back(m.name);
  return names;
}

}  // namespace engram
