#include "backends/ranks/rank_device.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#ifdef ENGRAM_HAVE_CUDA_BACKEND
#include "backends/cuda/cuda_device_compute.h"
#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/cuda_driver.h"
#include "backends/cuda/emulated_driver_compute.h"
#include "backends/cuda/gpu_host_probe.h"
#endif

namespace engram::ranks {

VisibleGpus visible_gpus() {
  VisibleGpus out;
#ifdef ENGRAM_HAVE_CUDA_BACKEND
  const cuda::GpuPresence presence = cuda::gpu_presence();
  out.count = presence.count;
  out.reason = presence.reason;
#else
  out.reason = "this engramlab is built without the CUDA backend (no nvcc at configure time, or ENGRAM_WITH_CUDA=OFF)";
#endif
  return out;
}

Result<RankDevice> open_rank_device(int local_rank, int world_rank, bool wanted, HostProbe& base,
                                    int ranks_per_gpu) {
  ENGRAM_CHECK(local_rank >= 0 && world_rank >= 0 && ranks_per_gpu >= 1);
  RankDevice out;
  const VisibleGpus gpus = visible_gpus();
  if (gpus.count == 0) {
    // The runtime refuses a device placement without a device, naming it.
    out.none_reason = gpus.reason;
    return out;
  }
  const int ordinal = local_rank / ranks_per_gpu;
  if (!wanted && ordinal >= gpus.count) {
    // A host placement works without one; with one its tables are also read
    // by the GPU (registered host memory).
    out.none_reason = fmt::format("LOCAL_RANK {} has no GPU of its own ({} visible): host lookups only", local_rank,
                                  gpus.count);
    return out;
  }
  if (ordinal >= gpus.count && ranks_per_gpu > 1)
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("LOCAL_RANK {} with --ranks-per-gpu {} would open GPU {}, but this process sees {} "
                              "GPU(s) (ordinals 0..{}); start at most {} ranks per host, or check CUDA_VISIBLE_DEVICES",
                              local_rank, ranks_per_gpu, ordinal, gpus.count, gpus.count - 1,
                              gpus.count * ranks_per_gpu),
                  {world_rank, -1, "open device"});
  if (ordinal >= gpus.count)
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("LOCAL_RANK {} has no GPU of its own: this process sees {} GPU(s) (ordinals 0..{}); "
                              "start at most {} ranks per host for a device placement, check CUDA_VISIBLE_DEVICES, "
                              "or let ranks share a GPU where the placement allows it (--ranks-per-gpu)",
                              local_rank, gpus.count, gpus.count - 1, gpus.count),
                  {world_rank, -1, "open device"});
#ifdef ENGRAM_HAVE_CUDA_BACKEND
  // open() retains this GPU's primary context in this process; every call
  // makes it current first, so the runtime's thread needs nothing else.
  auto memory = cuda::CudaDeviceMemory::open(ordinal);
  if (!memory.is_ok()) return std::move(memory).take_status().with_context(world_rank, -1, "open device");
  out.memory = std::move(memory).value();
  // The host row stager's CPU threads: this host's cores shared by the
  // ranks that may run on it (one per visible GPU), less two for the CUDA
  // callback thread and the rank's own.
  cuda::CudaComputeOptions compute_options;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  compute_options.stager_threads = std::max(1, cores / std::max(1, gpus.count * ranks_per_gpu) - 2);
  // The emulated driver runs no kernels, but its device pointers are this
  // process's memory: lookups run on the CPU through the same mappings.
  if (cuda::emulated_host())
    out.compute = std::make_unique<cuda::EmulatedDriverCompute>(ordinal);
  else
    out.compute = std::make_unique<cuda::CudaDeviceCompute>(ordinal, compute_options);
  // The probe adds the ordinal, the visible count and the GPU's NVLink
  // domain (NVML), so the exchange can choose FABRIC within a rack.
  out.probe = std::make_unique<cuda::GpuHostProbe>(base, ordinal, gpus.count);
  out.ordinal = ordinal;
  return out;
#else
  ENGRAM_CHECK(false && "visible_gpus() reports none without the CUDA backend");
  return out;
#endif
}

}  // namespace engram::ranks
