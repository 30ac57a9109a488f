#include "core/plan/planned_rank.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/check.h"

namespace engram {

PlannedRank planned_rank(const PlanResult& plan, int rank) {
  ENGRAM_CHECK(rank >= 0 && static_cast<size_t>(rank) < plan.ranks.size());
  PlannedRank out;
  out.placement = plan.ranks[static_cast<size_t>(rank)].placement;
  for (const PlacementGroupSummary& g : plan.groups) {
    if (g.placement != out.placement || std::find(g.ranks.begin(), g.ranks.end(), rank) == g.ranks.end()) continue;
    out.handle_type = g.handle_type;
    out.reason = g.reason;
    break;
  }
  return out;
}

std::vector<Placement> planned_placements(const PlanResult& plan) {
  std::vector<Placement> out;
  for (const PlacementOps& ops : placement_registry())
    if (std::any_of(plan.ranks.begin(), plan.ranks.end(), [&](const RankPlan& r) { return r.placement == ops.id; }))
      out.push_back(ops.id);
  return out;
}

std::vector<std::string> runtime_choice_differences(const PlanResult& plan, std::string_view file, int rank,
                                                    Placement chosen, std::optional<HandleType> chosen_handle,
                                                    std::string_view chosen_reason) {
  const PlannedRank planned = planned_rank(plan, rank);
  std::vector<std::string> out;
  if (planned.placement != chosen) {
    out.push_back(fmt::format("rank {}: placement: the plan of {} gives {} ({}), the runtime chose {}{}", rank, file,
                              placement_name(planned.placement), planned.reason, placement_name(chosen),
                              chosen_reason.empty() ? std::string() : fmt::format(" ({})", chosen_reason)));
    return out;
  }
  if (planned.handle_type && planned.handle_type != chosen_handle) {
    out.push_back(fmt::format("rank {}: handle type of {}: the plan of {} gives {}, the runtime agreed on {}", rank,
                              placement_name(chosen), file, handle_type_name(*planned.handle_type),
                              chosen_handle ? handle_type_name(*chosen_handle) : "none"));
  }
  return out;
}

}  // namespace engram
