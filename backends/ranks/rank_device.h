// The GPU of one real rank (`engramlab scenario rank`) and the GPU count the
// `--real` runner checks before launching a device scenario. Lives in
// harness/ so core/ stays free of backends/: with the CUDA backend built
// (ENGRAM_HAVE_CUDA_BACKEND) a rank placed on the device opens GPU LOCAL_RANK
// through the driver's VMM API (its own process, its own device's primary
// context); without the backend or without a GPU it has no device, as before.
#pragma once

#include <memory>
#include <string>

#include "core/backend/device_compute.h"
#include "core/backend/device_memory.h"
#include "core/backend/host_probe.h"
#include "core/base/status.h"

namespace engram::ranks {

// How many GPUs this process sees (CUDA_VISIBLE_DEVICES applies). 0 with
// `reason` when none: built without the CUDA backend, no driver, or no GPU.
struct VisibleGpus {
  int count = 0;
  std::string reason;
};
VisibleGpus visible_gpus();

struct RankDevice {
  std::unique_ptr<DeviceMemory> memory;  // null: this rank has no device
  std::unique_ptr<DeviceCompute> compute;  // with memory: the device lookup's kernels, NCCL and host registration
  // The backend's probe plus this rank's GPU ordinal, the visible count and
  // the GPU's NVLink domain (NVML fabric info; "" off a multi-node NVLink
  // system); null when there is no device (use the backend's probe as it is).
  std::unique_ptr<HostProbe> probe;
  std::string none_reason;               // why memory is null
  int ordinal = -1;                      // the CUDA device ordinal opened (-1: none)
};

// Where GPUs are visible, opens GPU `local_rank`; `base` must outlive the
// result. `wanted`: the scenario places this rank on the device, so a
// missing GPU of its own is an error; otherwise (a host placement, whose
// tables the GPU then also reads) it is no device.
// Errors: failed_precondition naming LOCAL_RANK and the visible count when
// local_rank has no GPU of its own and `wanted` (no wrapping onto a shared
// GPU: two ranks on one GPU are not what the scenario describes), or the
// driver's error when opening it fails. No GPU at all: no device, ok.
// `ranks_per_gpu` above 1 (asked for explicitly, never inferred): GPU
// local_rank / ranks_per_gpu, shared with the other ranks of that GPU.
Result<RankDevice> open_rank_device(int local_rank, int world_rank, bool wanted, HostProbe& base,
                                    int ranks_per_gpu = 1);

}  // namespace engram::ranks
