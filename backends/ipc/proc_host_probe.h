// Host identity from the kernel: the UTS hostname and the boot id. Two
// containers of one machine share the boot id; two network+UTS namespaces
// with different hostnames count as different hosts.
#pragma once

#include "core/backend/host_probe.h"
#include "core/status.h"

namespace engram::ipc {

Result<HostIdentity> read_host_identity();

// No GPU facts: this is the CPU-only host probe (the CUDA backend adds them).
class ProcHostProbe final : public HostProbe {
 public:
  PlacementFacts facts() override;
};

}  // namespace engram::ipc
