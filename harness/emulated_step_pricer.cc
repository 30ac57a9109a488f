#include "harness/emulated_step_pricer.h"

#include <algorithm>
#include <memory>

#include "core/base/check.h"
#include "core/placements/placement.h"
#include "core/plan/step_time_plan.h"

namespace engram::harness {

StepTime emulated_step_time(const PlanResult& plan, const StepConstants& constants, int rank, int64_t tokens,
                            int64_t slot_tokens, const sim::SlowFactors& slow) {
  ENGRAM_CHECK(rank >= 0 && static_cast<size_t>(rank) < plan.ranks.size());
  const RankPlan& rp = plan.ranks[static_cast<size_t>(rank)];
  ENGRAM_CHECK(rp.rank == rank);  // plan lists its ranks in order
  StepCostInput in = step_input_of(plan, rp, static_cast<int>(tokens));
  // The slot the step's ranks really pass (what an engine padding to the DP
  // slot pads to), where `plan` assumes the configured most.
  in.tokens_slot = static_cast<int>(std::max(slot_tokens, tokens));
  in.slow_link_factor = slow.link;
  in.slow_gpu_factor = slow.gpu;
  return placement_ops(rp.placement).step_time(in, constants);
}

sim::StepPricer emulated_step_pricer(const PlanResult& plan) {
  auto shared = std::make_shared<const PlanResult>(plan);
  auto constants = std::make_shared<const StepConstants>(step_constants_for(step_gpu_model(plan.deployment)));
  return [shared, constants](int rank, int64_t tokens, int64_t slot_tokens, const sim::SlowFactors& slow) {
    return emulated_step_time(*shared, *constants, rank, tokens, slot_tokens, slow).exposed_us;
  };
}

}  // namespace engram::harness
