#include "harness/scenario_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "core/base/text_list.h"

namespace engram::harness {

std::optional<Status> scenario_root_cause(const std::vector<Status>& statuses, int first_fault_rank) {
  if (first_fault_rank >= 0 && first_fault_rank < static_cast<int>(statuses.size()) &&
      !statuses[static_cast<size_t>(first_fault_rank)].is_ok())
    return statuses[static_cast<size_t>(first_fault_rank)];
  int at = -1;
  for (size_t r = 0; r < statuses.size(); ++r)
    if (!statuses[r].is_ok()) { at = static_cast<int>(r); break; }
  if (at < 0) return std::nullopt;
  std::vector<bool> seen(statuses.size(), false);
  for (;;) {
    seen[static_cast<size_t>(at)] = true;
    const Status& s = statuses[static_cast<size_t>(at)];
    const int peer = s.context().peer;
    if (s.code() != ErrorCode::kUnavailable || peer < 0 || peer >= static_cast<int>(statuses.size()) ||
        seen[static_cast<size_t>(peer)] || statuses[static_cast<size_t>(peer)].is_ok())
      return s;
    at = peer;
  }
}

std::optional<Placement> decided_placement(const Result<PlanResult>& plan, const std::vector<ScenarioRankResult>& ranks,
                                           size_t rank) {
  if (rank < ranks.size() && ranks[rank].started) return ranks[rank].placement;
  if (plan.is_ok() && rank < plan->ranks.size()) return plan->ranks[rank].placement;
  return std::nullopt;
}

void check_plan_matches_runtime(const Result<PlanResult>& plan, const std::optional<Status>& error,
                                const std::vector<ScenarioRankResult>& ranks, const std::vector<Warning>& warnings,
                                bool faults_fired, std::vector<std::string>& fail) {
  if (!plan.is_ok()) {
    for (size_t r = 0; r < ranks.size(); ++r)
      if (ranks[r].started) {
        fail.push_back(fmt::format("plan refused the deployment ({}), but rank {} started", plan.status().to_string(),
                                   r));
        break;
      }
    if (error && error->code() != plan.status().code() && !faults_fired)
      fail.push_back(fmt::format("plan refused with {}, the runtime failed with {}", plan.status().to_string(),
                                 error->to_string()));
    return;
  }
  for (size_t r = 0; r < ranks.size() && r < plan->ranks.size(); ++r)
    if (ranks[r].started && ranks[r].placement != plan->ranks[r].placement)
      fail.push_back(fmt::format("rank {}: the runtime placed {}, plan placed {}", r,
                                 placement_name(ranks[r].placement), placement_name(plan->ranks[r].placement)));
  std::set<std::string> plan_keys;
  for (const Warning& w : plan->warnings) plan_keys.insert(w.key);
  for (const Warning& w : warnings)
    if (!plan_keys.count(w.key))
      fail.push_back(fmt::format("the runtime warned '{}' but plan did not: {}", w.key, w.text));
}

std::vector<std::pair<Placement, int>> scenario_placement_counts(const Result<PlanResult>& plan,
                                                                 const std::vector<ScenarioRankResult>& ranks) {
  std::vector<std::pair<Placement, int>> counts;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::optional<Placement> p = decided_placement(plan, ranks, r);
    if (!p) continue;
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == *p; });
    if (it == counts.end()) counts.push_back({*p, 1});
    else ++it->second;
  }
  return counts;
}

std::string scenario_placement_summary(const Result<PlanResult>& plan, const std::vector<ScenarioRankResult>& ranks) {
  const auto counts = scenario_placement_counts(plan, ranks);
  if (counts.empty()) return "-";
  if (counts.size() == 1) return placement_name(counts[0].first);
  std::string text;
  for (const auto& [p, n] : counts) text += fmt::format("{}{} x{}", text.empty() ? "" : ", ", placement_name(p), n);
  return text;
}

void check_scenario_error(const ScenarioExpect& x, const std::optional<Status>& error, std::vector<std::string>& fail) {
  if (x.error) {
    if (!error) {
      fail.push_back(fmt::format("expected a {} error, but every rank succeeded", error_code_name(x.error->kind)));
      return;
    }
    const Status& e = *error;
    if (e.code() != x.error->kind)
      fail.push_back(fmt::format("error kind: expected {}, got {}: {}", error_code_name(x.error->kind),
                                 error_code_name(e.code()), e.to_string()));
    for (const std::string& word : x.error->contains)
      if (e.message().find(word) == std::string::npos)
        fail.push_back(fmt::format("error message lacks '{}': {}", word, e.to_string()));
    if (x.error->rank && e.context().rank != *x.error->rank)
      fail.push_back(fmt::format("error rank: expected {}, got {}: {}", *x.error->rank, e.context().rank, e.to_string()));
    if (x.error->step && e.context().step != *x.error->step)
      fail.push_back(fmt::format("error step: expected '{}', got '{}': {}", *x.error->step, e.context().step,
                                 e.to_string()));
  } else if (error) {
    fail.push_back("expected success, got: " + error->to_string());
  }
}

void check_scenario_decisions(const ScenarioExpect& x, const Result<PlanResult>& plan,
                              const std::optional<Status>& error, const std::vector<ScenarioRankResult>& ranks,
                              const std::vector<Warning>& warnings, bool faults_fired, std::vector<std::string>& fail) {
  const int world_size = static_cast<int>(ranks.size());
  check_plan_matches_runtime(plan, error, ranks, warnings, faults_fired, fail);

  for (const ExpectedPlacement& p : x.placements) {
    const int last = p.last_rank < 0 ? world_size - 1 : p.last_rank;
    if (last >= world_size) {
      fail.push_back(fmt::format("expect.placement names ranks {}-{}, but the job has {} ranks", p.first_rank, last,
                                 world_size));
      continue;
    }
    for (int r = p.first_rank; r <= last; ++r) {
      const std::optional<Placement> actual = decided_placement(plan, ranks, static_cast<size_t>(r));
      if (!actual) {
        fail.push_back(fmt::format("placement: expected {} for rank {}, but none was decided ({})",
                                   placement_name(p.placement), r, plan.status().to_string()));
        break;
      }
      if (*actual != p.placement) {
        fail.push_back(fmt::format("placement: expected {} for rank {}, got {}", placement_name(p.placement), r,
                                   placement_name(*actual)));
        break;
      }
    }
  }

  if (x.warnings) {
    std::string seen;
    for (const Warning& w : warnings) seen += fmt::format("\n    [{}] {}", w.key, w.text);
    if (x.warnings->empty() && !warnings.empty())
      fail.push_back(fmt::format("expected no warnings, got {}:{}", warnings.size(), seen));
    for (const std::string& word : *x.warnings) {
      bool found = std::any_of(warnings.begin(), warnings.end(),
                               [&](const Warning& w) { return w.text.find(word) != std::string::npos; });
      if (!found)
        fail.push_back(fmt::format("no warning contains '{}'; warnings:{}", word, seen.empty() ? " none" : seen));
    }
  }
}

void check_scenario_lookups(const ScenarioExpect& x, const std::vector<ScenarioRankResult>& ranks,
                            std::vector<std::string>& fail) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    const ScenarioRankResult& o = ranks[r];
    if (!o.lookup_mismatch.empty())
      fail.push_back(fmt::format("rank {} ({}): lookup differs from the direct lookup: {}", r,
                                 placement_name(o.placement), o.lookup_mismatch));
    if (!o.ids_mismatch.empty())
      fail.push_back(fmt::format("rank {}: ids differ from the accepted sequence hashed whole: {}", r, o.ids_mismatch));
    if (x.lookup_equal && !o.looked_up) {
      fail.push_back(fmt::format("lookup_equal: rank {} did not complete its lookups", r));
      break;
    }
  }
  if (x.ids_equal_whole) {
    uint64_t checked = 0;
    for (size_t r = 0; r < ranks.size(); ++r) {
      checked += ranks[r].ids_checked;
      if (!ranks[r].looked_up) {
        fail.push_back(fmt::format("ids_equal_whole: rank {} did not complete its steps", r));
        return;
      }
    }
    if (checked == 0)
      fail.push_back("ids_equal_whole: no rank hashed an id across steps or CP ranks (every step empty?)");
  }
}

void check_scenario_handle_types(const ScenarioExpect& x, const Result<PlanResult>& plan,
                                 const std::vector<ScenarioRankResult>& outcomes, std::vector<std::string>& fail) {
  // Handle type: what the runtime agreed on; plan's prediction when no rank
  // got that far. Checked over `ranks` (all of them, or one shard group's);
  // `what` names them in failures. Ranks that disagree are named once, as
  // ranges.
  auto check_handle_type = [&](HandleType expected, const std::vector<int>& ranks, const std::string& what) {
    std::optional<HandleType> actual;
    std::string from;
    for (int r : ranks)
      if (outcomes[static_cast<size_t>(r)].handle_type) {
        actual = outcomes[static_cast<size_t>(r)].handle_type;
        from = fmt::format("the runtime (rank {})", r);
        break;
      }
    std::vector<int> disagreeing;
    std::optional<HandleType> other;
    for (int r : ranks) {
      const auto& h = outcomes[static_cast<size_t>(r)].handle_type;
      if (h && actual && *h != *actual) {
        disagreeing.push_back(r);
        other = *h;
      }
    }
    if (!disagreeing.empty())
      fail.push_back(fmt::format("{}ranks disagree on the handle type: {} vs {} at rank{} {}", what,
                                 handle_type_name(*actual), handle_type_name(*other),
                                 disagreeing.size() == 1 ? "" : "s", compress_ranges(disagreeing)));
    if (!actual && plan.is_ok())
      for (const PlacementGroupSummary& g : plan->groups) {
        const bool ours = std::any_of(g.ranks.begin(), g.ranks.end(), [&](int r) {
          return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
        });
        if (g.handle_type && ours) {
          actual = g.handle_type;
          from = "plan";
          break;
        }
      }
    // `none`: no group shared device memory (or one fell back to plain memory).
    if (expected == HandleType::kNone) {
      if (actual && *actual != HandleType::kNone)
        fail.push_back(fmt::format("{}handle type: expected none, {} chose {}", what, from, handle_type_name(*actual)));
      return;
    }
    if (!actual)
      fail.push_back(fmt::format("{}handle type: expected {}, but no device_peer group chose one", what,
                                 handle_type_name(expected)));
    else if (*actual != expected)
      fail.push_back(fmt::format("{}handle type: expected {}, {} chose {}", what, handle_type_name(expected), from,
                                 handle_type_name(*actual)));
  };
  if (x.handle_type) {
    std::vector<int> all(static_cast<size_t>(static_cast<int>(outcomes.size())));
    for (int r = 0; r < static_cast<int>(outcomes.size()); ++r) all[static_cast<size_t>(r)] = r;
    check_handle_type(*x.handle_type, all, "");
  }
  if (!x.handle_types_by_group.empty()) {
    // Shard groups as plan numbered them (device placements only).
    std::map<int, std::vector<int>> groups;
    if (plan.is_ok())
      for (const RankPlan& r : plan->ranks)
        if (r.shard_group >= 0 && r.rank < static_cast<int>(outcomes.size())) groups[r.shard_group].push_back(r.rank);
    const std::string refused = plan.is_ok() ? "" : " (plan refused the deployment)";
    if (x.handle_types_every_group && groups.size() != x.handle_types_by_group.size()) {
      fail.push_back(fmt::format("expect.handle_type lists {} handle types, one per shard group, but the job has {} "
                                 "shard groups{}",
                                 x.handle_types_by_group.size(), groups.size(), refused));
    } else {
      // Plan numbers the groups 0.. in rank order, so the list's order is theirs.
      for (const auto& [group, expected] : x.handle_types_by_group) {
        const auto ranks = groups.find(group);
        if (ranks == groups.end())
          fail.push_back(fmt::format("expect.handle_type names shard group {}, but the job has {} shard groups{}",
                                     group, groups.size(), refused));
        else
          check_handle_type(expected, ranks->second,
                            fmt::format("shard group {} (ranks {}): ", group, compress_ranges(ranks->second)));
      }
    }
  }
}

}  // namespace engram::harness
