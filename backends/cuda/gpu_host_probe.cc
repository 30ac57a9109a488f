#include "backends/cuda/gpu_host_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>

#include "backends/cuda/cuda_driver.h"
#include "core/base/status.h"

namespace engram::cuda {

NvlinkDomain nvlink_domain_of_gpu(int ordinal) {
  ENGRAM_CHECK(ordinal >= 0);
  auto bus_id = pci_bus_id(ordinal);
  if (!bus_id.is_ok())
    return {.domain = "", .reason = fmt::format("no PCI bus id for GPU {}: {}", ordinal, bus_id.status().to_string())};
  return nvlink_domain_for_pci_bus_id(*bus_id);
}

GpuHostProbe::GpuHostProbe(HostProbe& base, int ordinal, int visible_gpu_count)
    : base_(base), ordinal_(ordinal), visible_gpu_count_(visible_gpu_count), domain_(nvlink_domain_of_gpu(ordinal)) {
  ENGRAM_CHECK(ordinal >= 0 && ordinal < visible_gpu_count);
  // Exactly one of the two is set: a domain, or why there is none.
  ENGRAM_CHECK(domain_.domain.empty() != domain_.reason.empty());
}

PlacementFacts GpuHostProbe::facts() {
  PlacementFacts f = base_.facts();
  if (auto emulated = emulated_host()) {
    f.host.hostname = emulated->hostname;
    f.host.boot_id = emulated->boot_id;
    f.imex_channel = emulated->imex_channel;
  }
  f.gpu_ordinal = ordinal_;
  f.visible_gpu_count = visible_gpu_count_;
  f.nvlink_domain = domain_.domain;
  return f;
}

std::optional<int> GpuHostProbe::gpu_numa_node() {
  auto bus_id = pci_bus_id(ordinal_);
  if (!bus_id.is_ok()) return std::nullopt;
  std::string id = *bus_id;
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // The driver may give an 8-digit domain ("00000000:3B:00.0"); sysfs names it with 4.
  if (id.size() > 12 && id.find(':') == 8) id = id.substr(4);
  std::ifstream in("/sys/bus/pci/devices/" + id + "/numa_node");
  int node = -1;
  if (!(in >> node) || node < 0) return std::nullopt;
  return node;
}

}  // namespace engram::cuda
