// The rules that decide which placement a rank gets (docs/design.md section 3):
// config.placement, where written, forces one by name; else
// peer_shards wins over any host table; no offload means device_collective;
// offload with dp_shared_memory disabled means host_private; enabled means
// host_shared, falling back to host_head_sharded (with one warning) where the
// node-local group has size 1 or /dev/shm is missing or smaller than the
// tables. The rule is per rank and needs no collective: every input is the
// same on every rank of a node (the node-local group size, /dev/shm presence
// and tmpfs *total*), so a node's ranks decide alike. What each placement is
// and does lives in core/placements/.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan/config_resolution.h"
#include "core/deployment/deployment.h"
#include "core/deployment/runtime_environment.h"
#include "core/engines/engine_profile.h"
#include "core/placements/host_shared.h"
#include "core/placements/placement.h"
#include "core/base/status.h"
#include "core/base/warnings.h"

namespace engram {

struct PlacementDecision {
  Placement placement = Placement::kDeviceCollective;
  std::vector<FallbackCause> fallback_causes;  // set only when falling back to host_head_sharded
  bool peer_precedence = false;                // peer_shards overrode a host table
  std::string reason;
};

// The rule for one rank, from its host's facts (`facts.min_node_local_group_size`:
// the rank's own group, the same on every rank of a host). An explicit
// `dp_shared_memory: true` must have passed validate_dp_shared_memory_strict
// first (checked: an unmet requirement here is a broken contract).
PlacementDecision decide_rank_placement(const EngramConfig& config, const DpSharedMemoryResolution& shared,
                                        const HostShmFacts& facts, uint64_t table_bytes_total);

// The once-per-process fallback warnings, from host_shared's capability check
// (host_shared_fitness): one per cause, naming every host where it holds
// with its own /dev/shm size (hosts of one size together) and the fixes of
// those hosts' environments (all where one is unknown). Under vLLM's wording
// only the /dev/shm-size warning names --shm-size / --ipc=host; the other two
// say the tables fall back to per rank, as vLLM words them.
std::vector<Warning> fallback_warnings(std::span<const HostShmUnmet> unfit, uint64_t table_bytes_total,
                                       FallbackWording wording = FallbackWording::kEngramlab);
Warning peer_precedence_warning();

}  // namespace engram
