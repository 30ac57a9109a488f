// Checks a Deployment before anything is decided and fills its defaults:
// the rank -> host map, boot ids, GPU memory by model. Every error is
// invalid_argument and names the field, its value and the fix.
#pragma once

#include <vector>

#include "core/deployment/deployment.h"
#include "core/base/status.h"

namespace engram {

// sequence_parallel exists only above TP1: invalid_argument naming the
// field, the value and the fix otherwise.
Status check_sequence_parallel(const EngramConfig& config, const ParallelLayout& layout);

// A deployment with every default made explicit: rank_hosts has world_size
// entries, each host has a boot id and its GPU memory.
Result<Deployment> validate_and_complete(const Deployment& deployment);

// The rank -> host map: `rank_hosts` checked, or hosts filled in order,
// gpu_count ranks each. Errors when tp * dp disagrees with what the hosts give.
Result<std::vector<int>> resolve_rank_hosts(const Deployment& deployment);

}  // namespace engram
