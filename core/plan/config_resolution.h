// Resolving `dp_shared_memory` (docs/design.md section 3, rules 1 and 2):
// unset -> enabled exactly when cpu_offload && dp > 1 && !elastic_ep; an
// explicit true is validated strictly, every unmet requirement named in one
// failed_precondition error.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/deployment/deployment.h"
#include "core/placements/host_shared.h"
#include "core/base/status.h"

namespace engram {

struct DpSharedMemoryResolution {
  bool enabled = false;
  bool is_explicit = false;  // the user wrote true or false
  std::string reason;        // why, in words, citing the rule
};

DpSharedMemoryResolution resolve_dp_shared_memory(const EngramConfig& config, const ParallelLayout& layout);

// For an explicit `dp_shared_memory: true`: ok, or one failed_precondition
// error listing every unmet requirement (no cpu_offload; dp = 1; elastic EP;
// and, from host_shared's capability check over `hosts` (those that hold
// ranks): replicas not co-located, /dev/shm missing, /dev/shm smaller than
// the tables, each host's size named), with the fixes of the environments
// those hosts run in. Reads tmpfs totals, never free space.
Status validate_dp_shared_memory_strict(const EngramConfig& config, const ParallelLayout& layout,
                                        std::span<const HostShmFacts> hosts, uint64_t table_bytes_total);

}  // namespace engram
