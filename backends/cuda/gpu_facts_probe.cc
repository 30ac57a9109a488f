#include "backends/cuda/gpu_facts_probe.h"

#include <fmt/format.h>

#include <algorithm>

#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/cuda_driver.h"
#include "backends/cuda/gpu_host_probe.h"

namespace engram::cuda {
namespace {

ObservedGpu probe_gpu(int ordinal, bool run_fabric_probe) {
  ObservedGpu gpu;
  gpu.ordinal = ordinal;
  const NvlinkDomain domain = nvlink_domain_of_gpu(ordinal);
  gpu.nvlink_domain = domain.domain;
  gpu.nvlink_domain_reason = domain.reason;
  auto memory = CudaDeviceMemory::open(ordinal);
  if (!memory.is_ok()) {
    gpu.error = fmt::format("cannot open: {}", memory.status().to_string());
    return gpu;
  }
  auto info = (*memory)->info();
  if (!info.is_ok()) {
    gpu.error = fmt::format("cannot read attributes: {}", info.status().to_string());
    return gpu;
  }
  gpu.device_name = info->name;
  gpu.bus_id = info->bus_id;
  gpu.memory_bytes_total = info->memory_bytes_total;
  gpu.memory_bytes_free = info->memory_bytes_free;
  gpu.granularity_bytes = info->granularity_bytes;
  gpu.vmm = info->vmm_supported;
  gpu.posix_fd = info->posix_fd_supported;
  gpu.fabric_attribute = info->fabric_attribute;
  if (run_fabric_probe) {
    gpu.fabric_probed = true;
    Status probe = gpu.vmm ? (*memory)->probe_fabric()
                           : Status(ErrorCode::kFailedPrecondition, "no VMM support",
                                    ErrorContext{.step = device_step_name(DeviceStep::kProbeFabric)});
    gpu.fabric_works = probe.is_ok();
    if (!probe.is_ok()) gpu.fabric_error = probe.to_string();
  }
  return gpu;
}

void probe_p2p(ObservedHost& out) {
  for (int a = 0; a < out.gpu_count; ++a) {
    for (int b = 0; b < out.gpu_count; ++b) {
      if (a == b) continue;
      auto can = can_access_peer(a, b);
      if (!can.is_ok()) {
        out.p2p_all = false;
        out.p2p_lines.push_back(fmt::format("GPU {} -> GPU {}: unknown ({})", a, b, can.status().to_string()));
      } else {
        if (!*can) out.p2p_all = false;
        out.p2p_lines.push_back(fmt::format("GPU {} -> GPU {}: {}", a, b, *can ? "yes" : "NO"));
      }
    }
  }
}

}  // namespace

void probe_gpu_facts(GpuProbeScope scope, int own_ordinal, ObservedHost& out) {
  out.cuda_built = true;
  const GpuPresence presence = gpu_presence();
  out.gpu_count = presence.count;
  if (presence.count == 0) {
    out.no_gpu_reason = presence.reason;
    return;
  }
  if (scope == GpuProbeScope::kOneGpu) {
    out.gpus.push_back(probe_gpu(std::max(own_ordinal, 0) % presence.count, false));
    return;
  }
  for (int g = 0; g < presence.count; ++g) out.gpus.push_back(probe_gpu(g, true));
  probe_p2p(out);
}

}  // namespace engram::cuda
