// Deployments the plan tests share: built in code so each test shows the
// topology it depends on.
#pragma once

#include <string>
#include <vector>

#include "core/deployment/deployment.h"
#include "core/base/units.h"

namespace engram::testing {

inline HostSpec host(std::string name, int gpus, std::string gpu_model = "H200") {
  HostSpec h;
  h.name = std::move(name);
  h.gpu_count = gpus;
  h.gpu_model = std::move(gpu_model);
  h.tmpfs_bytes_total = 64 * kMiB;
  return h;
}

// `host_count` hosts of `gpus` GPUs each, named n0, n1, ...
inline Deployment deployment(int host_count, int gpus, int tp, int dp, uint64_t shm_bytes,
                             std::string gpu_model = "H200") {
  Deployment d;
  for (int i = 0; i < host_count; ++i) {
    HostSpec h = host("n" + std::to_string(i), gpus, gpu_model);
    h.tmpfs_bytes_total = shm_bytes;
    d.hosts.push_back(h);
  }
  d.layout.tp = tp;
  d.layout.dp = dp;
  return d;
}

// DEP4: TP1 x DP4 on one GB200 node (4 GPUs), CPU offload on.
inline Deployment dep4_gb200(uint64_t shm_bytes) {
  Deployment d = deployment(1, 4, 1, 4, shm_bytes, "GB200");
  d.config.cpu_offload = true;
  return d;
}

// V4.1-Flash: 101,377,628,352 + 101,380,404,048 bytes.
inline constexpr uint64_t kFlashTableBytesTotal = 202'758'032'400ull;

}  // namespace engram::testing
