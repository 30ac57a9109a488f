#include "core/plan/plan_explain.h"

#include <fmt/format.h>

#include <algorithm>

namespace engram {

std::vector<DecidedBy> explain_decisions(const EngineProfile& engine, const Deployment& d, const PlanResult& plan,
                                         const ModelSpec& model) {
  std::vector<DecidedBy> out;
  auto add = [&](const char* key, std::string decision) { out.push_back(decided_by(engine, key, std::move(decision))); };
  const EngramConfig& c = d.config;
  if (!c.cpu_offload_given)
    add(rule_key::kCpuOffloadDefault, fmt::format("cpu_offload {} (not written)", c.cpu_offload ? "on" : "off"));
  int group_min = 0, group_max = 0;
  for (const RankPlan& rp : plan.ranks) {
    group_min = group_min == 0 ? rp.node_local_group_size : std::min(group_min, rp.node_local_group_size);
    group_max = std::max(group_max, rp.node_local_group_size);
  }
  add(rule_key::kNodeLocalGroup, group_min == group_max ? fmt::format("node-local Engram DP group of {}", group_min)
                                                        : fmt::format("node-local Engram DP groups of {}-{}",
                                                                      group_min, group_max));
  bool device = false, collective = false;
  for (const PlacementGroupSummary& g : plan.groups) {
    const bool on_device = is_device_placement(g.placement);
    device |= on_device;
    collective |= placement_ops(g.placement).collective_lookup && g.group_size > 1;
    const std::string what = fmt::format("ranks {}: {}", g.ranks_text, placement_name(g.placement));
    if (on_device) {
      add(rule_key::kDevicePlacement, what);
      if (placement_ops(g.placement).group == PlacementGroup::kShardGroup && engine.device_shard_group != nullptr)
        add(rule_key::kDeviceShardGroup, fmt::format("{} cut over groups of {}", what, g.group_size));
    } else {
      add(c.host_layout.empty() ? rule_key::kHostPlacement : rule_key::kHostLayouts,
          c.host_layout.empty() ? what : fmt::format("{} (host layout '{}')", what, c.host_layout));
    }
  }
  add(device ? rule_key::kDeviceTpSplit : rule_key::kHostTpSplit,
      fmt::format("TP split by {}", tp_split_name(device ? engine.device_tp_split : engine.host_tp_split)));
  if (collective) add(rule_key::kRowsBack, "how rows come back over the lookup's group");
  if (c.sequence_parallel && d.layout.tp > 1) add(rule_key::kSequenceParallel, "rows back under sequence parallelism");
  if (d.layout.prefill_cp > 1) add(rule_key::kContextParallel, fmt::format("prefill CP of {}", d.layout.prefill_cp));
  if (!model.tables.empty() && model.tables.front().row_format == RowFormat::kFp8E4M3Ue8m0)
    add(rule_key::kScaleBytes, "scale bytes " + scale_bytes_text(engine));
  // Each group's lookup follows the engine's rule for its path: summed over
  // more than one member or not (lookup_minus_zero).
  bool summed = false, not_summed = false;
  for (const PlacementGroupSummary& g : plan.groups)
    (placement_ops(g.placement).sums_members_rows && g.group_size > 1 ? summed : not_summed) = true;
  const bool kept_summed = keeps_minus_zero(lookup_minus_zero(engine, true));
  const bool kept_read = keeps_minus_zero(lookup_minus_zero(engine, false));
  add(rule_key::kMinusZero,
      kept_summed && kept_read     ? std::string("-0 kept on every path")
      : !kept_summed && !kept_read ? std::string("-0 written as +0 on every path")
      : summed && not_summed       ? std::string("-0 kept, but written as +0 where a lookup sums its members' rows")
      : summed                     ? std::string("-0 written as +0: the lookup sums its members' rows")
                                   : std::string("-0 kept: no lookup sums its members' rows"));
  if (std::any_of(plan.ranks.begin(), plan.ranks.end(),
                  [](const RankPlan& rp) { return rp.placement == Placement::kHostShared; }))
    add(rule_key::kShmAtCreation, "the /dev/shm copy at creation");
  if (std::any_of(plan.warnings.begin(), plan.warnings.end(),
                  [](const Warning& w) { return w.key.starts_with("dp_shared_memory.fallback."); }))
    add(rule_key::kFallbackWarnings, "the fallback warnings' wording");
  add(rule_key::kPadding, "what padding tokens read");
  add(rule_key::kVerifyBlocks, "verify blocks");
  add(rule_key::kExtraMemory, "memory the engine holds beside the tables");
  return out;
}

std::string format_decided_by(const std::vector<DecidedBy>& decisions) {
  std::string out = "decided by:\n";
  for (const DecidedBy& d : decisions)
    out += fmt::format("  {}\n    by {} rule {}: {}\n    source: {}\n", d.decision, d.engine, d.rule_key, d.rule_text,
                       d.source);
  return out;
}

}  // namespace engram
