// The GPU part of what a real host is (core/deployment/observed_host.h),
// through the driver as a real run opens its GPU: the visible count, each
// GPU's name, CUDA's memory total, VMM and handle attributes, PCI bus id and
// NVLink domain (NVML); for `doctor` on its own also the real FABRIC probe
// (create + export: the attribute alone lies without an IMEX channel) and
// P2P between every pair. The host part is backends/ipc/host_facts_probe.h.
#pragma once

#include "core/deployment/observed_host.h"

namespace engram::cuda {

enum class GpuProbeScope {
  kEveryGpu,  // `doctor` on its own: every visible GPU, the FABRIC probe, P2P
  kOneGpu,    // a launched rank: its own GPU only, nothing allocated on it
};

// Fills `out`'s GPU fields (cuda_built, gpu_count, no_gpu_reason, gpus,
// p2p_*). `own_ordinal` is the rank's GPU under kOneGpu, taken modulo the
// visible count (ranks sharing GPUs: LOCAL_RANK 3 of 2 GPUs looks at GPU 1,
// the same kind of GPU). Never fails: a GPU that cannot be opened or read is
// an entry with its error.
void probe_gpu_facts(GpuProbeScope scope, int own_ordinal, ObservedHost& out);

}  // namespace engram::cuda
