// `engramlab scenario run FILE|DIR... [--seed S] [--json] [--real]`: runs
// scenario files (DESIGN.md section 7) on the emulator and prints a
// pass/fail table; --real runs them on real processes of this host and
// compares with the emulator (harness/real_scenario.h). `scenario rank FILE` is
// the internal per-process entry of a real run (harness/real_rank_process.h).
// Exit codes: 0 every scenario passed; 1 one failed (why, and the line that
// reproduces it, follow the table); 2 a file could not be read or parsed.
#include <fmt/format.h>

#include <charconv>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "apps/flag_numbers.h"
#include "harness/real_rank_process.h"
#include "harness/real_scenario.h"
#include "core/base/json_output.h"
#include "core/base/progress.h"
#include "harness/scenario.h"
#include "harness/emulated_scenario.h"

namespace engram::app {
namespace {

struct ScenarioFlags {
  std::vector<std::string> paths;
  std::string seed;
  bool json = false;
  bool real = false;
  bool details = false;
  bool here = false;
  bool progress = false;
};

Json outcome_json(const sim::ScenarioOutcome& o) {
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
  j["ms"] = o.elapsed_ms;
  j["failures"] = o.failures;
  j["reproduce"] = o.reproduction;
  return j;
}

int run_scenarios(const ScenarioFlags& flags) {
  // Every error is a JSON document too under --json (and a line on stderr).
  auto fail = [&](const Status& status) {
    std::cerr << "error: " << status.message() << "\n";
    if (flags.json) std::cout << dump_json(error_document("scenario run", status)) << "\n";
    return 2;
  };
  std::optional<uint64_t> seed;
  if (!flags.seed.empty()) {
    auto value = whole_number_flag<uint64_t>("--seed", flags.seed, 0, UINT64_MAX);
    if (!value.is_ok()) return fail(value.status());
    seed = value.value();
  }
  std::vector<Scenario> scenarios;
  for (const std::string& path : flags.paths) {
    auto files = scenario_files(path);
    if (!files.is_ok()) return fail(files.status());
    for (const std::string& file : files.value()) {
      auto scenario = load_scenario_file(file);
      if (!scenario.is_ok()) return fail(scenario.status());
      scenarios.push_back(std::move(scenario).value());
    }
  }

  if (flags.real) {
    if (flags.json || !flags.seed.empty())
      return fail(invalid_argument(
          "--real takes neither --seed (real processes have no emulator seed) nor --json; drop them"));
    return run_scenarios_real(scenarios, {.here = flags.here});
  }

  std::vector<sim::ScenarioOutcome> outcomes;
  {
    Progress progress("scenario run", "scenarios", scenarios.size(),
                      flags.progress ? ProgressMode::kAlways : ProgressMode::kAuto);
    progress.keep_ticking();  // one scenario of 1,152 ranks takes seconds on its own
    for (const Scenario& s : scenarios) {
      progress.set_item(s.name);
      outcomes.push_back(sim::run_scenario(s, seed));
      progress.update(outcomes.size());
    }
  }
  int failed = 0;
  for (const auto& o : outcomes) failed += o.passed ? 0 : 1;

  if (flags.json) {
    Json j = json_document("scenario run");
    j["passed"] = static_cast<int64_t>(outcomes.size()) - failed;
    j["failed"] = failed;
    j["scenarios"] = Json::array();
    for (const auto& o : outcomes) j["scenarios"].push_back(outcome_json(o));
    j["warnings"] = Json::array();
    j["error"] = nullptr;
    std::cout << dump_json(j) << "\n";
    return failed == 0 ? 0 : 1;
  }

  size_t name_width = 8, placement_width = 9;
  for (const auto& o : outcomes) {
    name_width = std::max(name_width, o.name.size());
    placement_width = std::max(placement_width, o.placement.size());
  }
  std::cout << fmt::format("{:<{}}  {:<{}}  {:>8}  {:<19}  {:<6}  {:>7}\n", "scenario", name_width, "placement",
                           placement_width, "warnings", "error", "result", "ms");
  for (const auto& o : outcomes)
    std::cout << fmt::format("{:<{}}  {:<{}}  {:>8}  {:<19}  {:<6}  {:>7.1f}\n", o.name, name_width, o.placement,
                             placement_width, o.warning_count, o.error_kind, o.passed ? "pass" : "FAIL", o.elapsed_ms);
  if (flags.details) {
    // What a user reads: each scenario's warnings and error in full.
    for (const auto& o : outcomes) {
      if (o.warning_texts.empty() && o.error_text.empty()) continue;
      std::cout << fmt::format("\n{} ({}):\n", o.name, o.placement);
      for (const auto& w : o.warning_texts) std::cout << "  warning: " << w << "\n";
      if (!o.error_text.empty()) std::cout << "  error: " << o.error_text << "\n";
    }
  }
  for (const auto& o : outcomes) {
    if (o.passed) continue;
    std::cout << fmt::format("\nFAIL {} ({}):\n", o.name, o.source);
    for (const auto& f : o.failures) std::cout << "  - " << f << "\n";
    if (!o.error_text.empty()) std::cout << "  error seen: " << o.error_text << "\n";
    std::cout << "  reproduce: " << o.reproduction << "\n";
  }
  std::cout << fmt::format("\n{} of {} scenarios passed\n", outcomes.size() - static_cast<size_t>(failed),
                           outcomes.size());
  return failed == 0 ? 0 : 1;
}

CommandRegistration reg("30-scenario", [](CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ScenarioFlags>();
  CLI::App* cmd = app.add_subcommand("scenario", "Scenario files: a topology, a config, faults and expectations");
  cmd->require_subcommand(1);
  CLI::App* run = cmd->add_subcommand("run", "Run scenario files (or every *.yaml in a directory) on the emulator");
  run->add_option("paths", flags->paths, "scenario files or directories")->required();
  run->add_option("--seed", flags->seed, "replace each scenario's seed");
  run->add_flag("--json", flags->json, "print a machine-readable JSON object");
  run->add_flag("--details", flags->details, "after the table, print each scenario's warnings and error in full");
  run->add_flag("--real", flags->real,
                "also run each scenario on real processes of this host (engramlab launch) and compare them with "
                "the emulator rank by rank");
  run->add_flag("--here", flags->here,
                "with --real: run scenarios whose host (name, /dev/shm) is not this one on this machine as it is, "
                "instead of skipping them");
  run->add_flag("--progress", flags->progress,
                "show progress on stderr even when it is not a terminal (also ENGRAMLAB_PROGRESS=1)");
  run->callback([flags, &exit_code]() { exit_code = run_scenarios(*flags); });

  // Internal: one real rank, started by `scenario run --real` through
  // `engramlab launch` (or by torchrun/srun on a cluster).
  auto rank_flags = std::make_shared<ScenarioRankFlags>();
  CLI::App* rank = cmd->add_subcommand(
      "rank", "Run one rank of a scenario on real processes: what `scenario run --real` starts on this host, and what "
              "a cluster's launcher starts on every rank for a multi-host scenario (engramlab launch --nnodes, "
              "torchrun, srun or mpirun; see `engramlab launch --help`)");
  rank->add_option("file", rank_flags->file, "scenario file")->required();
  rank->add_option("--result-dir", rank_flags->result_dir, "write rank-<r>.json here (default: stdout)");
  rank->add_option("--die-rank", rank_flags->die_rank, "crash tests: this rank SIGKILLs itself at --die-at");
  rank->add_option("--die-at", rank_flags->die_at, "crash tests: shm_create:N or shm_open:N");
  rank->callback([rank_flags, &exit_code]() { exit_code = run_scenario_rank_process(*rank_flags); });
});

}  // namespace
}  // namespace engram::app
