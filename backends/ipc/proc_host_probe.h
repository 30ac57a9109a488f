// Host identity from the kernel: the UTS hostname and the boot id. Two
// containers of one machine share the boot id; two network+UTS namespaces
// with different hostnames count as different hosts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "backends/ipc/imex_channels.h"
#include "core/backend/host_probe.h"
#include "core/base/status.h"

namespace engram::ipc {

Result<HostIdentity> read_host_identity();

// MemTotal from /proc/meminfo; nullopt when it cannot be read.
std::optional<uint64_t> read_mem_total_bytes();

// Host identity and whether an IMEX channel exists under
// `imex_channel_dir` (tests point it at a temp dir). No GPU facts: this is
// the CPU-only host probe (the CUDA backend adds ordinal and NVLink domain).
// memory(): MemTotal (or `host_memory_bytes` where given: a run that stands
// for a scenario's host, ENGRAMLAB_HOST_MEMORY) and the memory cgroup this
// process is charged to (backends/shm/memory_cgroup.h), keyed by its path so
// the ranks of one container share it.
class ProcHostProbe final : public HostProbe {
 public:
  explicit ProcHostProbe(std::string imex_channel_dir = kImexChannelDir,
                         std::optional<uint64_t> host_memory_bytes = std::nullopt)
      : imex_channel_dir_(std::move(imex_channel_dir)), host_memory_bytes_(host_memory_bytes) {}
  PlacementFacts facts() override;
  MemoryFacts memory() override;

 private:
  std::string imex_channel_dir_;
  std::optional<uint64_t> host_memory_bytes_;
};

}  // namespace engram::ipc
