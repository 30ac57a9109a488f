// What this host is (core/deployment/observed_host.h), read through the
// backends' probes: the host's (backends/ipc/host_facts_probe.h) and, where
// this engramlab has the CUDA backend, the GPUs'
// (backends/cuda/gpu_facts_probe.h). `doctor` and the bridge of `acceptance`
// and `bench` ask this one function, so they judge the same facts.
#pragma once

#include <string>

#include "core/deployment/observed_host.h"

namespace engram::app {

struct ObserveOptions {
  std::string shm_dir = "/dev/shm";  // the directory a real run uses (ENGRAMLAB_SHM_DIR)
  // `doctor` on its own: every GPU, the FABRIC probe and P2P. Otherwise only
  // GPU `own_gpu` (a launched rank's), with nothing allocated on it.
  bool every_gpu = false;
  int own_gpu = 0;
};

ObservedHost observe_this_host(const ObserveOptions& options);

}  // namespace engram::app
