// The config that asks the plan for one placement: the placement-choosing
// fields reset, then the placement's registration asks for it
// (PlacementOps::ask_plan_for). The bench and `plan --sweep` ask this way.
#pragma once

#include "core/deployment/deployment.h"
#include "core/placements/placement.h"

namespace engram {

inline EngramConfig config_asking_for(Placement placement, EngramConfig base) {
  base.cpu_offload = false;
  base.peer_shards = false;
  base.dp_shared_memory.reset();
  base.placement.clear();
  if (const auto ask = placement_ops(placement).ask_plan_for) ask(base);
  return base;
}

}  // namespace engram
