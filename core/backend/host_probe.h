// What a rank can learn about where it runs: host identity, NVLink/IMEX
// domain, GPUs it sees. The handle-type decision and the node-local group are
// built from these facts, gathered from every rank.
#pragma once

#include <string>

#include "core/deployment/runtime_environment.h"

namespace engram {

struct HostIdentity {
  std::string hostname;
  std::string boot_id;  // /proc/sys/kernel/random/boot_id: two containers on one host share it
  bool operator==(const HostIdentity&) const = default;
  std::string to_string() const { return hostname + "/" + boot_id; }
};

struct PlacementFacts {
  HostIdentity host;
  std::string nvlink_domain;     // "" when the GPU is in no NVLink domain
  bool imex_channel = false;     // /dev/nvidia-caps-imex-channels/channel* present
  int gpu_ordinal = -1;
  int visible_gpu_count = 0;     // a container may see one GPU only
  // Docker, Kubernetes or a bare host: which fixes warnings name (all when unknown).
  RuntimeEnvironment environment = RuntimeEnvironment::kUnknown;
};

class HostProbe {
 public:
  virtual ~HostProbe() = default;
  virtual PlacementFacts facts() = 0;
};

}  // namespace engram
