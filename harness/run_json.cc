#include "harness/run_json.h"

#include <fmt/format.h>

#include "harness/drawn_scenario.h"

namespace engram::harness {

Json scenario_outcome_json(const ScenarioOutcome& o) {
  Json j = Json::object();
  j["name"] = o.name;
  j["file"] = o.source;
  j["seed"] = o.seed;
  j["result"] = o.passed ? "pass" : "fail";
  // One placement when every rank agrees, else null and the mix in "placements".
  j["placement"] = o.placements.size() == 1 ? Json(placement_name(o.placements[0].first)) : Json(nullptr);
  j["placements"] = Json::array();
  for (const auto& [placement, ranks] : o.placements)
    j["placements"].push_back({{"placement", placement_name(placement)}, {"ranks", ranks}});
  j["warnings"] = warnings_json(o.warnings);
  j["error"] = o.error ? error_json(*o.error) : Json(nullptr);
  j["trace_hash"] = fmt::format("{:016x}", o.trace_hash);
  // Ranks alike on one entry: the step model's time of their own lookup
  // steps, and what they then waited on their peers (the clock's whole us).
  j["step_times"] = Json::array();
  for (const StepTimeGroup& g : fold_step_times(o.step_times))
    j["step_times"].push_back({{"ranks", g.ranks},
                               {"steps", g.summary.steps},
                               {"step_time_us_p50", g.summary.p50_us},
                               {"step_time_us_max", g.summary.max_us},
                               {"waited_us_max", g.summary.waited_max_us},
                               {"waited_us_total", g.summary.waited_total_us}});
  j["ms"] = o.elapsed_ms;
  j["failures"] = o.failures;
  j["rank_table"] = o.rank_table;
  j["reproduce"] = o.reproduction;
  return j;
}

namespace {

Json seed_json(const SwarmSeedResult& r) {
  return {{"seed", r.seed},
          {"passed", r.passed},
          {"outcome", r.outcome},
          {"job", r.description},
          {"trace_hash", fmt::format("{:016x}", r.trace_hash)},
          {"violations", r.violations},
          {"reproduce", r.reproduction}};
}

}  // namespace

Json swarm_report_json(const SwarmReport& report) {
  Json j = json_document("fuzz");
  j["first_seed"] = report.first_seed;
  j["seeds"] = report.seed_count;
  j["check_determinism"] = report.check_determinism;
  j["passed"] = report.passed();
  j["failed_seeds"] = report.failures.size();
  j["fault_sites"] = Json::array();
  for (int s = 0; s < sim::kFaultSiteCount; ++s) {
    const auto i = static_cast<size_t>(s);
    j["fault_sites"].push_back({{"site", sim::fault_site_name(static_cast<sim::FaultSite>(s))},
                                {"reached", report.reached[i]},
                                {"fired", report.fired[i]},
                                {"seeds_fired", report.seeds_fired[i]}});
  }
  j["coverage"] = Json::array();
  for (const auto& [probe, hits] : report.coverage)
    j["coverage"].push_back({{"probe", probe}, {"hits", hits.first}, {"seeds", hits.second}});
  j["probes_never_hit"] = report.probes_never_hit();
  j["outcomes"] = Json::array();
  for (const auto& [outcome, seeds] : report.outcomes) j["outcomes"].push_back({{"outcome", outcome}, {"seeds", seeds}});
  j["failures"] = Json::array();
  for (const auto& f : report.failures) j["failures"].push_back(seed_json(f));
  j["sites_never_fired"] = Json::array();
  for (sim::FaultSite site : report.sites_never_fired()) j["sites_never_fired"].push_back(sim::fault_site_name(site));
  j["seconds"] = report.elapsed_ms / 1000.0;
  j["warnings"] = Json::array();
  j["error"] = nullptr;
  return j;
}

ScenarioOutcome run_scenario_or_drawn(const Scenario& scenario, std::optional<uint64_t> seed_override,
                                      EmulatedOutcome* run) {
  return scenario.faults_drawn ? run_drawn_scenario(scenario, seed_override, run)
                               : run_scenario(scenario, seed_override, run);
}

}  // namespace engram::harness
