// The rules that decide which placement a rank gets (docs/design.md section 3):
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
#include <string>
#include <string_view>
#include <vector>

#include "core/plan/config_resolution.h"
#include "core/deployment/deployment.h"
#include "core/deployment/runtime_environment.h"
#include "core/placements/placement.h"
#include "core/base/status.h"
#include "core/base/warnings.h"

namespace engram {

// Why a resolved-enabled dp_shared_memory cannot work (it then falls back to
// host_head_sharded with a warning).
enum class FallbackCause : uint8_t { kGroupSizeOne, kShmMissing, kShmTooSmall };
const char* fallback_cause_name(FallbackCause cause);  // "group_size_1", "shm_missing", "shm_too_small"

// What one rank knows locally.
struct RankHostFacts {
  int node_local_group_size = 1;
  bool shm_mounted = true;
  uint64_t tmpfs_bytes_total = 0;  // the total, never the free space: the same on every rank of a node
};

struct PlacementDecision {
  Placement placement = Placement::kDeviceCollective;
  std::vector<FallbackCause> fallback_causes;  // set only when falling back to host_head_sharded
  bool peer_precedence = false;                // peer_shards overrode a host table
  std::string reason;
};

// The rule for one rank. An explicit `dp_shared_memory: true` must have passed
// validate_dp_shared_memory_strict first (checked: an unmet requirement here
// is a broken contract).
PlacementDecision decide_rank_placement(const EngramConfig& config, const DpSharedMemoryResolution& shared,
                                        const RankHostFacts& facts, uint64_t table_bytes_total);

// The once-per-process warnings (fallback, peer precedence). `hosts` names
// where the cause holds; `tmpfs_bytes_total` is the size found (kShmTooSmall
// only); `environment` picks the fixes named (all when unknown).
Warning fallback_warning(FallbackCause cause, const std::vector<std::string>& hosts, uint64_t table_bytes_total,
                         uint64_t tmpfs_bytes_total, RuntimeEnvironment environment = RuntimeEnvironment::kUnknown);
// The same with each host's own tmpfs total (parallel to `hosts`): hosts of
// one size are named together, each size once.
Warning fallback_warning(FallbackCause cause, const std::vector<std::string>& hosts, uint64_t table_bytes_total,
                         const std::vector<uint64_t>& tmpfs_bytes_by_host, RuntimeEnvironment environment);
Warning peer_precedence_warning();

}  // namespace engram
