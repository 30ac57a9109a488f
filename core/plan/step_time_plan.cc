#include "core/plan/step_time_plan.h"

#include <algorithm>

#include "core/engines/engine_profile.h"
#include "core/model/table_spec.h"
#include "core/placements/placement.h"
#include "core/plan/engine_step_rules.h"

namespace engram {
namespace {

// Whether ranks a and b reach each other over NVLink: one host, or hosts of
// one NVLink domain.
bool nvlink_between(const PlanResult& plan, const RankPlan& a, const RankPlan& b) {
  if (a.host == b.host) return true;
  const auto& hosts = plan.deployment.hosts;
  if (a.host < 0 || b.host < 0 || a.host >= static_cast<int>(hosts.size()) || b.host >= static_cast<int>(hosts.size()))
    return false;
  return !hosts[a.host].nvlink_domain.empty() && hosts[a.host].nvlink_domain == hosts[b.host].nvlink_domain;
}

LinkKind link_of_members(const PlanResult& plan, const RankPlan& rank, bool (*member)(const RankPlan&, const RankPlan&)) {
  for (const RankPlan& other : plan.ranks)
    if (member(rank, other) && !nvlink_between(plan, rank, other)) return LinkKind::kNetwork;
  return LinkKind::kNvlink;
}

// A placement's lookup group is the kind its ops name, not whether it is on
// the device: SGLang's per_rank layout cuts host rows over the row-shard
// group (every TP rank), and sums them back over it.
bool cuts_over_shard_group(const RankPlan& rank) {
  return placement_ops(rank.placement).group == PlacementGroup::kShardGroup;
}
bool same_group(const RankPlan& a, const RankPlan& b) {
  if (a.placement != b.placement) return false;
  return cuts_over_shard_group(a) ? a.shard_group == b.shard_group : a.node_local_group == b.node_local_group;
}
bool same_replica(const RankPlan& a, const RankPlan& b) { return a.dp_rank == b.dp_rank; }

}  // namespace

StepCostInput step_input_of(const PlanResult& plan, const RankPlan& rank, int tokens) {
  StepCostInput in;
  in.tokens = tokens;
  in.tokens_slot = plan.deployment.config.tokens_per_rank_max;
  in.heads = plan.model.heads_per_table.empty() ? 24 : plan.model.heads_per_table.front();
  in.row_bytes = plan.model.row_bytes;
  const uint64_t dim = plan.model.row_format == "bf16" ? plan.model.row_bytes / 2
                                                       : plan.model.row_bytes * kScaleBlock / (kScaleBlock + 1);
  in.out_row_bytes = 2 * dim;
  in.table_bytes = plan.model.table_bytes.empty() ? 0 : plan.model.table_bytes.front();
  in.group_size = std::max(1, cuts_over_shard_group(rank) ? rank.shard_group_size : rank.node_local_group_size);
  in.group_link = link_of_members(plan, rank, same_group);
  in.tp = plan.deployment.layout.tp;
  in.tp_link = link_of_members(plan, rank, same_replica);
  in.sequence_parallel = plan.deployment.config.sequence_parallel;
  const std::string gpu = rank.host >= 0 && rank.host < static_cast<int>(plan.deployment.hosts.size())
                              ? plan.deployment.hosts[rank.host].gpu_model
                              : std::string("H200");
  in.host_link = gpu_link_facts(gpu).c2c_gbps > 0 ? LinkKind::kNvlinkC2c : LinkKind::kPcie;
  in.rules = engine_step_rules(plan.deployment.engine.profile, plan.deployment);
  return in;
}

PlanStepTimes plan_step_times(const PlanResult& plan, const StepConstants& constants, std::span<const int> tokens) {
  PlanStepTimes out;
  out.engine = engine_name(plan.deployment.engine.profile);
  out.rules_source = engine_step_rules(plan.deployment.engine.profile, plan.deployment).source;
  out.calibration = constants.calibration;
  out.gpu_model = constants.gpu_model;
  for (const PlacementGroupSummary& g : plan.groups) {
    if (g.ranks.empty()) continue;
    const RankPlan* rank = nullptr;
    for (const RankPlan& rp : plan.ranks)
      if (rp.rank == g.ranks.front()) rank = &rp;
    if (rank == nullptr) continue;
    PlacementStepRow row;
    row.placement = g.placement;
    row.ranks_text = g.ranks_text;
    row.tp = plan.deployment.layout.tp;
    for (int t : tokens) {
      const StepCostInput in = step_input_of(plan, *rank, t);
      row.group_size = in.group_size;
      row.group_link = in.group_link;
      row.tokens.push_back(t);
      row.times.push_back(placement_ops(g.placement).step_time(in, constants));
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

double plan_step_time_us_max(const PlanResult& plan, const StepConstants& constants, int tokens) {
  const int t[] = {tokens};
  double worst = 0;
  for (const PlacementStepRow& row : plan_step_times(plan, constants, t).rows)
    worst = std::max(worst, row.times.front().exposed_us);
  return worst;
}

std::string step_gpu_model(const Deployment& deployment) {
  return deployment.hosts.empty() ? std::string("H200") : deployment.hosts.front().gpu_model;
}

}  // namespace engram
