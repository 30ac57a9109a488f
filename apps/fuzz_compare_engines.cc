#include "apps/fuzz_compare_engines.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/base/check.h"
#include "core/engines/engine_profile.h"
#include "core/report/engine_comparison.h"

namespace engram::app {
namespace {

// Lines under an engine's name stay within a terminal of 120 columns.
constexpr size_t kOutcomeWidth = 106;

// What one engine's row runs: the deployment as `plan --compare-engines`
// planned its column (its other host layout where the default cannot run
// here, or without the settings it lacks: `fuzz --host-layout` and
// `--without` say so in a rerun line), or as given where the plan refuses
// it outright: the runtime then refuses it as plan does, and the row shows
// that refusal.
struct EngineRun {
  harness::SwarmTarget target;
  std::string ran_as;  // "host_shared", "sglang_private with host_layout: per_rank (...)"
};

EngineRun engine_run(const harness::SwarmTarget& given, const EngineProfile& engine) {
  const EngineChoice choice{engine.id, ""};
  const EngineColumn column = compare_engines(*given.deployment, std::span(&choice, 1)).front();
  EngineRun run;
  run.target = given;
  run.target.engine = engine.name;
  // This engine set, and what the column changed (or the file as given).
  run.target.deployment = column.planned_from;
  if (!column.planned_with.empty()) {
    run.target.host_layout = column.planned_from.config.host_layout;
    run.ran_as = fmt::format("{} with {} (its default refused here; plan --engine {} says why)", column.placement,
                             column.planned_with, engine.name);
  } else if (!column.planned_without.empty()) {
    run.target.without = column.planned_without;
    run.ran_as = fmt::format("{} without {} (it lacks {}; as asked, refused)", column.placement,
                             fmt::join(column.planned_without, ", "),
                             column.planned_without.size() == 1 ? "it" : "them");
  } else {
    run.ran_as = column.status.is_ok() ? column.placement
                                       : fmt::format("refused by plan ({})", error_code_name(column.status.code()));
  }
  return run;
}

// "host_shared; 16 seeds: 6 ok, 0 broke a rule; 10 ended in one error kind:
// deadline_exceeded (hang) 3, resource_exhausted (shm_create) 2", as lines
// beside and under the engine's name, wrapped between items, never inside
// one ("resource_exhausted (shm_create) 2").
std::vector<std::string> outcome_lines(const std::string& ran_as, const harness::SwarmReport& report) {
  std::vector<std::pair<int, std::string>> errors;
  int ok = 0, errored = 0;
  for (const auto& [outcome, seeds] : report.outcomes) {
    if (outcome.rfind("ok ", 0) == 0) {
      ok += seeds;
    } else {
      errored += seeds;
      errors.push_back({seeds, outcome.rfind("error ", 0) == 0 ? outcome.substr(6) : outcome});
    }
  }
  std::stable_sort(errors.begin(), errors.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> items = {ran_as + ";"};
  items.push_back(fmt::format("{} seeds: {} ok, {} broke a rule{}", report.seed_count, ok, report.failures.size(),
                              errored > 0 ? fmt::format("; {} ended in one error kind:", errored) : ""));
  for (size_t i = 0; i < errors.size(); ++i)
    items.push_back(fmt::format("{} {}{}", errors[i].second, errors[i].first, i + 1 < errors.size() ? "," : ""));
  std::vector<std::string> lines = {items.front()};
  for (size_t i = 1; i < items.size(); ++i) {
    if (lines.back().size() + 1 + items[i].size() > kOutcomeWidth) lines.push_back(items[i]);
    else lines.back() += " " + items[i];
  }
  return lines;
}

}  // namespace

int fuzz_compare_engines(const harness::SwarmTarget& target, uint64_t first_seed, int seeds, bool check_determinism,
                         std::ostream& out) {
  ENGRAM_CHECK_MSG(target.deployment.has_value(), "fuzz --compare-engines runs a deployment file");
  ENGRAM_CHECK(seeds > 0);
  std::vector<harness::SwarmSeedResult> failures;
  double elapsed_ms = 0;
  for (const EngineProfile& engine : engine_registry()) {
    const EngineRun run = engine_run(target, engine);
    const harness::SwarmReport report = harness::run_swarm(first_seed, seeds, check_determinism, {}, run.target);
    elapsed_ms += report.elapsed_ms;
    const std::vector<std::string> lines = outcome_lines(run.ran_as, report);
    for (size_t i = 0; i < lines.size(); ++i)
      out << fmt::format("{:<12}{}\n", i == 0 ? std::string(engine.name) : "", lines[i]);
    failures.insert(failures.end(), report.failures.begin(), report.failures.end());
  }
  for (const harness::SwarmSeedResult& f : failures) {
    out << fmt::format("FAIL seed {}: {}\n", f.seed, f.outcome);
    for (const std::string& v : f.violations) out << "  - " << v << "\n";
    out << "  reproduce: " << f.reproduction << "\n";
  }
  out << fmt::format("fuzz --compare-engines: {} seeds from {} under each of {} engines: {} broke a rule; {:.1f} s\n",
                     seeds, first_seed, engine_registry().size(), failures.size(), elapsed_ms / 1000.0);
  return failures.empty() ? 0 : 1;
}

}  // namespace engram::app
