// The host probe of a rank that owns a GPU: the base probe's host facts
// (hostname, boot id, IMEX channel) plus what only the rank with its GPU
// knows: its ordinal, the visible GPU count and the GPU's NVLink domain from
// NVML. The handle exchange picks FABRIC handles only when every rank
// reports the same non-empty domain, so this is where a real NVL72 rack's
// domain enters the gathered facts.
#pragma once

#include "backends/cuda/nvml_fabric.h"
#include "core/backend/host_probe.h"

namespace engram::cuda {

// The NVLink domain of GPU `ordinal` (CUDA_VISIBLE_DEVICES applies): its PCI
// bus id from the CUDA driver, then NVML's fabric info. Never fails: no
// driver, no NVML or no fabric is an empty domain with the reason.
NvlinkDomain nvlink_domain_of_gpu(int ordinal);

class GpuHostProbe final : public HostProbe {
 public:
  // Asks NVML once, here; `base` must outlive the probe.
  GpuHostProbe(HostProbe& base, int ordinal, int visible_gpu_count);
  PlacementFacts facts() override;
  MemoryFacts memory() override { return base_.memory(); }
  // /sys/bus/pci/devices/<its PCI bus id>/numa_node; -1 there (a single
  // node, or firmware that does not say) is nullopt.
  std::optional<int> gpu_numa_node() override;
  // The domain facts() reports, and why it is empty when it is.
  const NvlinkDomain& nvlink_domain() const { return domain_; }

 private:
  HostProbe& base_;
  int ordinal_;
  int visible_gpu_count_;
  NvlinkDomain domain_;
};

}  // namespace engram::cuda
