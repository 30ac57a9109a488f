// Validating an explicit `dp_shared_memory: true` (docs/design.md section 3,
// rule 2): every unmet requirement named in one failed_precondition error.
// Its resolution (rule 1) is core/deployment/dp_shared_memory.h, below the
// engines that read it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/deployment/deployment.h"
#include "core/deployment/dp_shared_memory.h"
#include "core/placements/host_shared.h"
#include "core/base/status.h"

namespace engram {

// For an explicit `dp_shared_memory: true`: ok, or one failed_precondition
// error listing every unmet requirement (no cpu_offload; dp = 1; elastic EP;
// and, from host_shared's capability check over `hosts` (those that hold
// ranks): replicas not co-located, /dev/shm missing, /dev/shm smaller than
// the tables, each host's size named), with the fixes of the environments
// those hosts run in. Reads tmpfs totals, never free space.
Status validate_dp_shared_memory_strict(const EngramConfig& config, const ParallelLayout& layout,
                                        std::span<const HostShmFacts> hosts, uint64_t table_bytes_total);

}  // namespace engram
