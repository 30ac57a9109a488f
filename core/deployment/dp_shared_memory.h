// Resolving `dp_shared_memory` (docs/design.md section 3, rule 1): unset ->
// enabled exactly when cpu_offload && dp > 1 && !elastic_ep. Strict
// validation of an explicit true is core/plan/config_resolution.h.
#pragma once

#include <string>

#include "core/deployment/deployment.h"

namespace engram {

struct DpSharedMemoryResolution {
  bool enabled = false;
  bool is_explicit = false;  // the user wrote true or false
  std::string reason;        // why, in words, citing the rule
};

DpSharedMemoryResolution resolve_dp_shared_memory(const EngramConfig& config, const ParallelLayout& layout);

}  // namespace engram
