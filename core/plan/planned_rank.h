// What `plan` of a deployment says one rank runs, and how that compares with
// what the runtime chose on the real cluster (the bridge of `acceptance
// --file` and `bench --file`): the plan decides from the file's facts, the
// runtime from the real ones, so the same placement and handle type on both
// is the check that the cluster is the one planned.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend/device_memory.h"
#include "core/placements/placement.h"
#include "core/plan/deployment_plan.h"

namespace engram {

struct PlannedRank {
  Placement placement = Placement::kDeviceCollective;
  std::optional<HandleType> handle_type;  // where the rank's group agrees one (device_peer)
  std::string reason;                     // the plan's, for its group
};

// `rank` must be one of the plan's ranks.
PlannedRank planned_rank(const PlanResult& plan, int rank);

// Every placement the plan gives some rank, in registry order.
std::vector<Placement> planned_placements(const PlanResult& plan);

// Each difference a line naming both, e.g. "rank 1: placement: the plan of
// dep.yaml gives host_shared (<its reason>), the runtime chose
// host_head_sharded (<its reason>)"; the handle type is compared only where
// both placements agree and the plan has one. An empty chosen_reason is
// left out.
std::vector<std::string> runtime_choice_differences(const PlanResult& plan, std::string_view file, int rank,
                                                    Placement chosen, std::optional<HandleType> chosen_handle,
                                                    std::string_view chosen_reason);

}  // namespace engram
