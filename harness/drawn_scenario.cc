#include "harness/drawn_scenario.h"

#include <chrono>

#include "core/base/check.h"
#include "core/base/rerun_command.h"
#include "harness/swarm.h"
#include "harness/swarm_target.h"

namespace engram::harness {

ScenarioOutcome run_drawn_scenario(const Scenario& scenario, std::optional<uint64_t> seed_override,
                                   EmulatedOutcome* run) {
  ENGRAM_CHECK(scenario.faults_drawn);
  const auto started = std::chrono::steady_clock::now();
  ScenarioOutcome result;
  result.name = scenario.name;
  result.source = scenario.source;
  result.seed = seed_override.value_or(scenario.seed);
  result.reproduction = rerun_command(
      {"scenario", "run", absolute_file_path(scenario.source), "--seed", std::to_string(result.seed)});
  // The target as `fuzz --file` reads it, from the same file.
  auto target = load_swarm_target(scenario.source, "");
  if (!target.is_ok()) {
    result.failures.push_back(target.status().to_string());
    return result;
  }
  const SwarmSeedResult seed_run = run_swarm_seed(result.seed, /*check_determinism=*/false, target.value());
  result.passed = seed_run.passed;
  result.failures = seed_run.violations;
  result.trace_hash = seed_run.trace_hash;
  result.faults = seed_run.faults;
  result.coverage = seed_run.coverage;
  // "ok host_shared" or "error unavailable (step import)".
  const std::string& said = seed_run.outcome;
  if (said.rfind("ok ", 0) == 0) {
    result.placement = said.substr(3);
  } else if (said.rfind("error ", 0) == 0) {
    result.placement = "-";
    result.error_kind = said.substr(6, said.find(' ', 6) == std::string::npos ? std::string::npos
                                                                                : said.find(' ', 6) - 6);
    result.error_text = said;
  } else {
    result.placement = said;
  }
  if (run != nullptr) {
    SwarmCase drawn = draw_swarm_case(result.seed, target.value());
    drawn.job.reproduction = result.reproduction;
    drawn.job.keep_timeline = true;
    *run = run_emulated_job(drawn.job);
    ENGRAM_CHECK(run->world.trace_hash == seed_run.trace_hash);  // the same case, drawn twice
  }
  result.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace engram::harness
