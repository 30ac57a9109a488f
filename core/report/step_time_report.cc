#include "core/report/step_time_report.h"

#include <fmt/format.h>

#include "core/report/plan_report.h"

namespace engram {

std::string format_step_times(const PlanStepTimes& times) {
  std::string out = fmt::format(
      "step time (one lookup of one layer per rank, model p50, as {} runs it; calibration: {}):\n", times.engine,
      times.calibration);
  out += fmt::format("  engine: {}\n", times.rules_source);
  for (const PlacementStepRow& row : times.rows) {
    out += fmt::format("  {} (ranks {}; group of {} over {}, TP {}):\n", placement_name(row.placement), row.ranks_text,
                       row.group_size, link_kind_name(row.group_link), row.tp);
    out += fmt::format("    {:>8} {:>12} {:>12} {:>12}\n", "tokens", "p50 us", "exposed us", "hidden us");
    for (size_t i = 0; i < row.tokens.size(); ++i)
      out += fmt::format("    {:>8} {:>12.1f} {:>12.1f} {:>12.1f}\n", row.tokens[i], row.times[i].total_us,
                         row.times[i].exposed_us, row.times[i].hidden_us);
    if (row.times.empty()) continue;
    out += fmt::format("    at {} tokens:", row.tokens.back());
    for (const StepTerm& t : row.times.back().terms)
      out += fmt::format(" {} {:.1f} us ({});", t.what, t.us, link_kind_name(t.link));
    out.back() = '\n';
  }
  return out;
}

Json step_times_json(const PlanStepTimes& times) {
  Json j;
  j["engine"] = times.engine;
  j["engine_rules"] = times.rules_source;
  j["calibration"] = times.calibration;
  j["gpu_model"] = times.gpu_model;
  j["placements"] = Json::array();
  for (const PlacementStepRow& row : times.rows) {
    Json r;
    r["placement"] = placement_name(row.placement);
    r["ranks"] = row.ranks_text;
    r["group_size"] = row.group_size;
    r["group_link"] = link_kind_name(row.group_link);
    r["steps"] = Json::array();
    for (size_t i = 0; i < row.tokens.size(); ++i) {
      Json s;
      s["tokens_per_rank"] = row.tokens[i];
      s["step_time_us_p50"] = row.times[i].total_us;
      s["exposed_us"] = row.times[i].exposed_us;
      s["hidden_us"] = row.times[i].hidden_us;
      Json terms = Json::array();
      for (const StepTerm& t : row.times[i].terms)
        terms.push_back({{"what", t.what}, {"link", link_kind_name(t.link)}, {"us", t.us}});
      s["terms"] = std::move(terms);
      r["steps"].push_back(std::move(s));
    }
    j["placements"].push_back(std::move(r));
  }
  return j;
}

Json plan_document(const FitCheckedPlan& checked, const StepConstants& constants, std::span<const int> tokens,
                   Json calibration_fit) {
  Json j = plan_json(checked.plan);
  j["step_time"] = step_times_json(plan_step_times(checked.plan, constants, tokens));
  j["calibration_fit"] = std::move(calibration_fit);
  j["error"] = error_json_or_null(checked.fits);
  return j;
}

}  // namespace engram
