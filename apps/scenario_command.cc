// `engramlab scenario run FILE|DIR... [--seed S] [--json] [--real]`: runs
// scenario files (docs/design.md section 7) on the emulator and prints a
// pass/fail table (a file with `faults: drawn` runs as one swarm seed;
// `--emit` prints its drawn case as a scenario of its own); --real runs them on real processes of this host and
// compares with the emulator (harness/real_scenario.h). `scenario rank FILE` is
// the internal per-process entry of a real run (harness/real_rank_process.h).
// Exit codes: 0 every scenario passed; 1 one failed (why, and the line that
// reproduces it, follow the table); 2 a file could not be read or parsed.
#include <climits>
#include <cstdint>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "core/engines/engine_profile.h"
#include "apps/flag_numbers.h"
#include "core/base/text_excerpt.h"
#include "harness/real_rank_process.h"
#include "harness/real_scenario.h"
#include "core/base/file_replace.h"
#include "core/base/json_output.h"
#include "harness/junit_xml.h"
#include "core/base/progress.h"
#include "core/base/seed_list.h"
#include "harness/scenario.h"
#include "harness/drawn_scenario.h"
#include "harness/emulated_scenario.h"
#include "harness/run_json.h"
#include "harness/run_timeline.h"
#include "harness/scenario_emit.h"
#include "harness/swarm_target.h"

namespace engram::app {
namespace {

struct ScenarioFlags {
  std::vector<std::string> paths;
  std::string seed;
  std::string engine;  // --engine: over each file's engine.name
  bool json = false;
  bool real = false;
  bool details = false;
  bool here = false;
  bool emulate_driver = false;  // --emulate-driver: --real over the emulated CUDA driver
  bool progress = false;
  std::string trace;     // --trace: Chrome/Perfetto trace-event JSON of each run
  std::string timeline;  // --timeline: the same as SVG swimlanes
  std::string pattern;   // -k: only scenarios whose name or file path contains it
  bool exitfirst = false;  // -x: stop after the first failing scenario
  std::string junitxml;  // --junitxml: a JUnit XML report, one testcase per scenario
  bool emit = false;     // --emit: a `faults: drawn` file's drawn case as a scenario on stdout
};

// `--emit`: the one file's drawn case (at its seed or --seed) as a scenario
// on stdout, checked to reproduce the same trace hash when run alone.
int emit_drawn_scenario(const harness::Scenario& s, std::optional<uint64_t> seed) {
  const uint64_t drawn_seed = seed.value_or(s.seed);
  Result<harness::EmittedScenario> emitted = internal_error("unset");
  if (s.faults_drawn) {
    auto target = harness::load_swarm_target(s.source, "");
    if (!target.is_ok()) {
      std::cerr << "error: " << target.status().message() << "\n";
      return 2;
    }
    emitted = harness::emit_swarm_case(drawn_seed, target.value());
  } else {
    emitted = harness::emit_rated_scenario(s, drawn_seed);
  }
  if (!emitted.is_ok()) {
    std::cerr << "error: " << emitted.status().message() << "\n";
    return 1;
  }
  std::cout << emitted->yaml;
  std::cerr << fmt::format("emitted {} at seed {}: run alone it passes with trace hash {:016x}, as the drawn run\n",
                           s.source, drawn_seed, emitted->trace_hash);
  return 0;
}

// --junitxml: a testcase per scenario; a failing one's failure holds what
// differed, the rank table and the reproduce line.
std::string scenarios_junit_xml(const std::vector<harness::ScenarioOutcome>& outcomes) {
  std::vector<JunitCase> cases;
  for (const auto& o : outcomes) {
    JunitCase c{.name = o.name, .classname = "scenario." + o.name, .file = o.source, .seconds = o.elapsed_ms / 1000,
                .failed = !o.passed};
    if (!o.passed) {
      for (const auto& f : o.failures) c.failure_text += "- " + f + "\n";
      for (const auto& line : o.rank_table) c.failure_text += "  " + line + "\n";
      c.failure_text += "reproduce: " + o.reproduction + "\n";
      c.failure_message = o.failures.empty() ? "failed" : o.failures.front();
    }
    cases.push_back(std::move(c));
  }
  return junit_xml("engramlab scenario run", cases);
}

int run_scenarios(const ScenarioFlags& flags) {
  // Every error is a JSON document too under --json (and a line on stderr).
  auto fail = [&](const Status& status) {
    std::cerr << "error: " << status.message() << "\n";
    if (flags.json) std::cout << dump_json(error_document("scenario run", status)) << "\n";
    return 2;
  };
  // --seed 7, 1-20 or 1,5,9-12: each scenario at each seed.
  std::vector<uint64_t> seeds;
  if (!flags.seed.empty()) {
    auto value = parse_seed_list(flags.seed, "--seed");
    if (!value.is_ok()) return fail(value.status());
    seeds = std::move(value).value();
  }
  const std::optional<uint64_t> seed = seeds.empty() ? std::nullopt : std::optional<uint64_t>(seeds.front());
  if (seeds.size() > 1 && (flags.emit || flags.real || !flags.trace.empty() || !flags.timeline.empty()))
    return fail(invalid_argument(fmt::format("--seed {}: {} seeds; --emit, --real, --trace and --timeline take one "
                                             "seed, e.g. --seed {}",
                                             flags.seed, seeds.size(), seeds.front())));
  std::optional<EngineChoice> engine;
  if (!flags.engine.empty()) {
    auto id = parse_engine_choice(flags.engine, "--engine");
    if (!id.is_ok()) return fail(id.status());
    if (flags.real)
      return fail(invalid_argument("--engine: real processes read each scenario's file again; write engine: {name: "
                                   "...} in the file instead"));
    engine = id.value();
  }
  std::vector<harness::Scenario> scenarios;
  std::vector<Warning> skipped;  // named on stderr and in the JSON's warnings
  for (const std::string& path : flags.paths) {
    auto files = harness::scenario_files(path);
    if (!files.is_ok()) return fail(files.status());
    for (const std::string& why : files->skipped) {
      std::cerr << "warning: scenario " << why << "\n";
      skipped.push_back({"scenario.unreadable_file", "scenario " + why});
    }
    for (const std::string& file : files->files) {
      auto scenario = harness::load_scenario_file(file);
      if (!scenario.is_ok()) return fail(scenario.status());
      if (engine) {  // over the file's engine.name
        scenario->deployment.engine.profile = engine->id;
        scenario->deployment.engine.variant = engine->variant;
      }
      scenarios.push_back(std::move(scenario).value());
    }
  }
  if (!flags.pattern.empty()) {
    std::erase_if(scenarios, [&](const harness::Scenario& s) {
      return s.name.find(flags.pattern) == std::string::npos && s.source.find(flags.pattern) == std::string::npos;
    });
    if (scenarios.empty())
      return fail(invalid_argument(fmt::format(
          "-k {}: no scenario's name or file path contains '{}'; `engramlab scenario run PATH` lists them all",
          flags.pattern, flags.pattern)));
  }

  if (flags.emit) {
    const bool drawn_parts =
        scenarios.size() == 1 && (scenarios.front().faults_drawn || !scenarios.front().fault_rates.empty());
    if (!drawn_parts)
      return fail(invalid_argument(fmt::format(
          "--emit: {} scenario(s) given{}; give exactly one file with drawn parts (`faults: drawn`, or fault "
          "`rates:`) to write the case its seed draws out as a scenario",
          scenarios.size(),
          scenarios.size() == 1 ? fmt::format(", and {} plans all its faults itself", scenarios.front().source)
                                : "")));
    if (flags.json || flags.real || !flags.trace.empty() || !flags.timeline.empty() || !flags.junitxml.empty())
      return fail(invalid_argument("--emit prints a scenario file and takes none of --json, --real, --trace, "
                                   "--timeline, --junitxml; drop them"));
    return emit_drawn_scenario(scenarios.front(), seed);
  }
  if (flags.emulate_driver && !flags.real)
    return fail(invalid_argument("--emulate-driver runs the real processes of --real over the emulated CUDA driver; "
                                 "add --real"));
  if (flags.real) {
    for (const harness::Scenario& s : scenarios)
      if (s.faults_drawn)
        return fail(invalid_argument(fmt::format(
            "--real: {} has `faults: drawn`, which only the emulator draws; write its case out first with "
            "`engramlab scenario run --emit {}` and run that",
            s.source, s.source)));
    if (flags.exitfirst || !flags.junitxml.empty())
      return fail(invalid_argument("--real takes neither -x nor --junitxml; drop them"));
    if (flags.json || !flags.seed.empty())
      return fail(invalid_argument(
          "--real takes neither --seed (real processes have no emulator seed) nor --json; drop them"));
    return harness::run_scenarios_real(scenarios, {.here = flags.here, .emulate_driver = flags.emulate_driver});
  }

  // Output paths refused before any scenario runs (write_output_file checks
  // them again when it writes); several scenarios' drawings take names
  // derived from the paths, checked as they are written.
  for (const auto& [path, what] : {std::pair{scenarios.size() == 1 ? flags.trace : "", "the --trace file"},
                                   {scenarios.size() == 1 ? flags.timeline : "", "the --timeline SVG"},
                                   {flags.junitxml, "the JUnit XML report"}})
    if (!path.empty())
      if (const Status usable = check_output_path(path, what); !usable.is_ok()) return fail(usable);

  std::vector<harness::ScenarioOutcome> outcomes;
  {
    Progress progress("scenario run", "scenarios", scenarios.size() * std::max<size_t>(seeds.size(), 1),
                      flags.progress ? ProgressMode::kAlways : ProgressMode::kAuto);
    progress.keep_ticking();  // one scenario of 1,152 ranks takes seconds on its own
    for (const harness::Scenario& s : scenarios) {
     for (size_t k = 0; k < std::max<size_t>(seeds.size(), 1); ++k) {
      progress.set_item(s.name);
      const bool draw = !flags.trace.empty() || !flags.timeline.empty();
      harness::EmulatedOutcome run;
      const std::optional<uint64_t> this_seed = seeds.empty() ? std::nullopt : std::optional<uint64_t>(seeds[k]);
      outcomes.push_back(harness::run_scenario_or_drawn(s, this_seed, draw ? &run : nullptr));
      // Several seeds: each run named as the pytest plugin names it (`-k NAME-seed5` selects it there).
      if (seeds.size() > 1) outcomes.back().name += fmt::format("-seed{}", seeds[k]);
      if (draw) {
        // One scenario: the paths as given; several: the scenario's name in each.
        auto path = [&](const std::string& p) { return scenarios.size() == 1 || p.empty() ? p : harness::drawing_path_for(p, s.name); };
        if (const Status written = harness::write_run_drawings(run, s.name, path(flags.trace), path(flags.timeline));
            !written.is_ok())
          return fail(written);
      }
      progress.update(outcomes.size());
      if (flags.exitfirst && !outcomes.back().passed) break;
     }
     if (flags.exitfirst && !outcomes.empty() && !outcomes.back().passed) break;
    }
  }
  int failed = 0;
  for (const auto& o : outcomes) failed += o.passed ? 0 : 1;
  if (!flags.junitxml.empty())
    if (const Status written = write_output_file(flags.junitxml, scenarios_junit_xml(outcomes), "the JUnit XML report");
        !written.is_ok())
      return fail(written);

  if (flags.json) {
    Json j = json_document("scenario run");
    j["passed"] = static_cast<int64_t>(outcomes.size()) - failed;
    j["failed"] = failed;
    j["scenarios"] = Json::array();
    for (const auto& o : outcomes) j["scenarios"].push_back(harness::scenario_outcome_json(o));
    j["warnings"] = warnings_json(skipped);
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
      const std::vector<std::string> steps = harness::step_time_lines(o.step_times);
      const bool timed = std::any_of(o.step_times.begin(), o.step_times.end(),
                                     [](const harness::RankStepSummary& s) { return s.steps > 0; });
      if (o.warning_texts.empty() && (o.error_text.empty() || !o.passed) && !timed) continue;
      std::cout << fmt::format("\n{} ({}):\n", o.name, o.placement);
      for (const auto& w : o.warning_texts) std::cout << "  warning: " << w << "\n";
      // A failing scenario's error follows in its FAIL block, once.
      if (!o.error_text.empty() && o.passed) std::cout << "  error: " << o.error_text << "\n";
      if (timed) {
        std::cout << "  lookup step time (the step model's, per rank; then waiting on peers):\n";
        for (const std::string& line : steps) std::cout << "    " << line << "\n";
      }
    }
  }
  for (const auto& o : outcomes) {
    if (o.passed) continue;
    std::cout << fmt::format("\nFAIL {} ({}):\n", o.name, excerpt(o.source, kEchoedValueBytes));
    for (const auto& f : o.failures) std::cout << "  - " << f << "\n";
    const bool error_in_failures = std::any_of(o.failures.begin(), o.failures.end(), [&](const std::string& f) {
      return f.find(o.error_text) != std::string::npos;
    });
    if (!o.error_text.empty() && !error_in_failures) std::cout << "  error seen: " << o.error_text << "\n";
    if (!o.rank_table.empty()) {
      std::cout << "  ranks (ranks alike on one line):\n";
      for (const std::string& line : o.rank_table) std::cout << "    " << line << "\n";
    }
    std::cout << "  reproduce: " << o.reproduction << "\n";
  }
  std::cout << fmt::format("\n{} of {} scenarios passed\n", outcomes.size() - static_cast<size_t>(failed),
                           outcomes.size());
  if (const size_t runs = scenarios.size() * std::max<size_t>(seeds.size(), 1); outcomes.size() < runs)
    std::cout << fmt::format("-x: stopped after the first failure; {} scenarios not run\n", runs - outcomes.size());
  return failed == 0 ? 0 : 1;
}

CommandRegistration scenario_registration("30-scenario", [](CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ScenarioFlags>();
  CLI::App* cmd = app.add_subcommand("scenario", "Scenario files: a topology, a config, faults and expectations");
  cmd->require_subcommand(1);
  CLI::App* run = cmd->add_subcommand("run", "Run scenario files (or every *.yaml in a directory) on the emulator");
  run->add_option("paths", flags->paths, "scenario files or directories")->required();
  run->add_option("--seed", flags->seed,
                  "replace each scenario's seed: one (7), a range (1-20) or a list (1,5,9-12); several run each "
                  "scenario at each, named NAME-seedS");
  run->add_option("--engine", flags->engine,
                  fmt::format("plan every scenario by this engine's rules ({}), over the files' engine.name",
                              engine_names_text()));
  run->add_flag("--json", flags->json, "print a machine-readable JSON object");
  run->add_option("--trace", flags->trace,
                  "write each run as a Chrome/Perfetto trace (JSON trace events: a track per rank, a slice per "
                  "step, faults and errors as instants); several scenarios: FILE.<name>.json");
  run->add_option("--timeline", flags->timeline,
                  "write each run as SVG swimlanes (ranks down, time across, faults and errors marked)");
  run->add_option("-k", flags->pattern, "run only scenarios whose name or file path contains PATTERN");
  run->add_flag("-x,--exitfirst", flags->exitfirst, "stop after the first failing scenario");
  run->add_option("--junitxml", flags->junitxml,
                  "write a JUnit XML report (one testcase per scenario, the failures and reproduce line in each "
                  "failure) for a CI dashboard");
  run->add_flag("--emit", flags->emit,
                "for one file with drawn parts (`faults: drawn` or fault rates): print the case its seed (or "
                "--seed) draws as a scenario file, the outcome seen as its expectation (redirect it into scenarios/)");
  run->add_flag("--details", flags->details,
                "after the table, print each scenario's warnings and error in full, and each rank's lookup step "
                "time (p50, max, waiting on peers)");
  run->add_flag("--real", flags->real,
                "also run each scenario on real processes of this host (engramlab launch) and compare them with "
                "the emulator rank by rank");
  run->add_flag("--here", flags->here,
                "with --real: run scenarios whose host (name, /dev/shm) is not this one on this machine as it is, "
                "instead of skipping them");
  run->add_flag("--emulate-driver", flags->emulate_driver,
                "with --real: every rank runs over the emulated CUDA driver and NVML as the rank of the scenario's "
                "world it is (its hosts, GPUs, NVLink domains, IMEX channels; no GPU needed), so device_peer "
                "scenarios run through the real backend; lookups read the imported mappings on the CPU");
  run->add_flag("--progress", flags->progress,
                "show progress on stderr even when it is not a terminal (also ENGRAMLAB_PROGRESS=1)");
  run->callback([flags, &exit_code]() { exit_code = run_scenarios(*flags); });

  // Internal: one real rank, started by `scenario run --real` through
  // `engramlab launch` (or by torchrun/srun on a cluster).
  auto rank_flags = std::make_shared<harness::ScenarioRankFlags>();
  CLI::App* rank = cmd->add_subcommand(
      "rank", "Run one rank of a scenario on real processes: what `scenario run --real` starts on this host, and what "
              "a cluster's launcher starts on every rank for a multi-host scenario (engramlab launch --nnodes, "
              "torchrun, srun or mpirun; see `engramlab launch --help`)");
  rank->add_option("file", rank_flags->file, "scenario file")->required();
  rank->add_option("--result-dir", rank_flags->result_dir, "write rank-<r>.json here (default: stdout)");
  rank->add_option("--die-rank", rank_flags->die_rank, "crash tests: this rank SIGKILLs itself at --die-at");
  rank->add_option("--die-at", rank_flags->die_at, "crash tests: shm_create:N or shm_open:N");
  rank->callback([rank_flags, &exit_code]() { exit_code = harness::run_scenario_rank_process(*rank_flags); });
});

}  // namespace
}  // namespace engram::app
