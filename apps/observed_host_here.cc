#include "apps/observed_host_here.h"

#include "backends/ipc/host_facts_probe.h"

#ifdef ENGRAM_HAVE_CUDA_BACKEND
#include "backends/cuda/gpu_facts_probe.h"
#endif

namespace engram::app {

ObservedHost observe_this_host(const ObserveOptions& options) {
  ObservedHost host;
  ipc::HostFactsProbeOptions host_options;
  host_options.shm_dir = options.shm_dir;
  ipc::probe_host_facts(host_options, host);
#ifdef ENGRAM_HAVE_CUDA_BACKEND
  cuda::probe_gpu_facts(options.every_gpu ? cuda::GpuProbeScope::kEveryGpu : cuda::GpuProbeScope::kOneGpu,
                        options.own_gpu, host);
#else
  host.cuda_built = false;
  host.no_gpu_reason = "CUDA support was not built into this engramlab (nvcc was not found at build time)";
#endif
  return host;
}

}  // namespace engram::app
