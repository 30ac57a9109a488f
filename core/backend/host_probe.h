// What a rank can learn about where it runs: host identity, NVLink/IMEX
// domain, GPUs it sees. The handle-type decision and the node-local group are
// built from these facts, gathered from every rank.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
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

// A memory limit a rank runs under (a memory cgroup: a container's, a pod's,
// or the rank's own). Ranks of one host that report the same key share the
// limit; a key only one rank reports is a limit per rank.
struct MemoryLimitFact {
  uint64_t key = 0;  // 0: no limit in this slot
  uint64_t limit_bytes = 0;
};

// What bounds the memory a rank's tables may take, as the memory fit
// (core/plan/memory_fit.h) judges it.
struct MemoryFacts {
  uint64_t host_memory_bytes = 0;  // the host's RAM (MemTotal); 0: unknown
  // A limit the /dev/shm total does not show (a Kubernetes emptyDir
  // sizeLimit): the emulator knows it; a real rank cannot see it.
  std::optional<uint64_t> tmpfs_bytes_enforced;
  // The rank's own limit and its container's, where there are such.
  std::array<MemoryLimitFact, 2> limits{};
};

class HostProbe {
 public:
  virtual ~HostProbe() = default;
  virtual PlacementFacts facts() = 0;
  // The default: nothing known (no limit is then judged).
  virtual MemoryFacts memory() { return {}; }
  // The NUMA node of the rank's GPU (sysfs numa_node of its PCI device);
  // nullopt where there is no GPU or the machine does not say.
  virtual std::optional<int> gpu_numa_node() { return std::nullopt; }
};

}  // namespace engram
