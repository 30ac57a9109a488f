// `engramlab fuzz --seeds N [--seed S] [--file F] [--sites a,b] [--check-determinism] [--verbose] [--junitxml F]`:
// swarm mode (harness/swarm.h). Each seed draws a job (with --file: faults,
// interleaving and timeouts around the file's deployment) and checks the invariants;
// the end shows which fault sites fired, the coverage probes hit and those never hit, and the
// outcomes. Exit codes: 0 every seed held and (for a sweep of 500 seeds or
// more) every fault site fired; 1 otherwise; 2 bad flags.
#include <climits>
#include <cstdint>
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "apps/command_registry.h"
#include "apps/flag_numbers.h"
#include "apps/fuzz_compare_engines.h"
#include "core/base/file_replace.h"
#include "core/base/text_excerpt.h"
#include "core/base/text_list.h"
#include "core/base/json_output.h"
#include "core/base/progress.h"
#include "core/engines/engine_profile.h"
#include "core/plan/deployment_plan.h"
#include "core/report/engine_comparison.h"
#include "core/base/rerun_command.h"
#include "core/base/seed_list.h"
#include "harness/run_json.h"
#include "harness/run_timeline.h"
#include "harness/scenario_emit.h"
#include "harness/swarm_junit.h"
#include "harness/swarm.h"
#include "harness/swarm_target.h"

namespace engram::app {
namespace {

struct FuzzFlags {
  std::string seeds_text = "100";
  std::string seed_text = "1";
  bool seeds_given = false;  // --seeds on the command line (not its default)
  int seeds = 0;       // from seeds_text, or --seed A-B's count
  uint64_t seed = 0;   // from seed_text
  std::string file;   // --file: the deployment held fixed
  std::string sites;  // --sites: the fault sites drawn
  std::string trace;     // --trace: the first failing seed's run (else the first seed's) as trace events
  std::string timeline;  // --timeline: the same run as SVG
  std::string emit_seed_text;  // --emit-scenario: print this seed's case as a scenario file
  bool check_determinism = false;
  bool verbose = false;  // one line per seed
  bool json = false;
  bool progress = false;
  std::string junitxml;  // --junitxml: a testcase per seed
  std::string engine;    // --engine: whose rules plan the file's deployment (over its engine.name)
  bool brief = false;    // --brief: the outcomes and the summary line alone
  std::string host_layout;  // --host-layout: the engine's host layout for the file's deployment
  std::string without;      // --without: engine settings left out of the file's deployment
  bool compare_engines = false;  // --compare-engines: the file under each engine, two lines each (tools/run.sh)
};

// The whole-number flags, as every command reads them.
// --seed takes a range too (as scenario run's --seed and the pytest plugin
// do): A-B runs the seeds A..B, what --seed A --seeds B-A+1 runs.
Status read_numbers(FuzzFlags& flags) {
  ENGRAM_ASSIGN_OR_RETURN(flags.seeds, whole_number_flag<int>("--seeds", flags.seeds_text, 1, harness::kMaxSwarmSeeds));
  // One seed (a leading '-' is a sign): read as every whole-number flag is.
  if (flags.seed_text.find_first_of(",-", 1) == std::string::npos) {
    ENGRAM_ASSIGN_OR_RETURN(flags.seed, whole_number_flag<uint64_t>("--seed", flags.seed_text, 0, UINT64_MAX));
    return Status::ok();
  }
  ENGRAM_ASSIGN_OR_RETURN(const std::vector<uint64_t> listed, parse_seed_list(flags.seed_text, "--seed"));
  for (size_t i = 1; i < listed.size(); ++i)
    if (listed[i] != listed[i - 1] + 1)
      return invalid_argument(fmt::format("--seed {}: fuzz runs consecutive seeds; give one range (--seed {}-{}) or a "
                                          "first seed and a count (--seed {} --seeds N)",
                                          flags.seed_text, listed.front(), listed.back(), listed.front()));
  flags.seed = listed.front();
  if (listed.size() > 1) {
    if (flags.seeds_given && static_cast<size_t>(flags.seeds) != listed.size())
      return invalid_argument(fmt::format("--seed {} names {} seeds and --seeds {} another count; give one of them",
                                          flags.seed_text, listed.size(), flags.seeds_text));
    flags.seeds = static_cast<int>(listed.size());
  }
  return Status::ok();
}

// `--emit-scenario SEED`: the case as a scenario file on stdout, checked
// first: run alone it must pass and give the seed's trace hash.
int emit_scenario(const FuzzFlags& flags, const harness::SwarmTarget& target) {
  auto seed = whole_number_flag<uint64_t>("--emit-scenario", flags.emit_seed_text, 0, UINT64_MAX);
  if (!seed.is_ok()) {
    std::cerr << "error: " << seed.status().message() << "\n";
    return 2;
  }
  auto emitted = harness::emit_swarm_case(seed.value(), target);
  if (!emitted.is_ok()) {
    std::cerr << "error: " << emitted.status().message() << "\n";
    return 1;
  }
  std::cout << emitted->yaml;
  std::cerr << fmt::format("emitted seed {}: run alone it passes with trace hash {:016x}, as the seed's run\n",
                           seed.value(), emitted->trace_hash);
  return 0;
}

// The coverage probes a sweep around `deployment` can reach, by the part of
// the code each names (its name's prefix): handle-exchange probes need a
// placement that shares device memory by handle, /dev/shm probes a
// node's /dev/shm copy, the host-read probe a host table. Others (weight
// sharing) stay listed. Every probe where the deployment does not plan.
struct ProbeReach {
  bool handles = true, shm = true, host_tables = true;
};

ProbeReach probe_reach(const Deployment& deployment) {
  WarningSink sink;
  auto plan = plan_deployment(deployment, sink);
  if (!plan.is_ok()) return {};
  ProbeReach r{false, false, false};
  for (const PlacementGroupSummary& g : plan->groups) r.handles |= g.handle_type.has_value();
  for (const HostMemory& h : plan->hosts) {
    r.shm |= h.shm_bytes > 0;
    r.host_tables |= h.host_table_bytes > 0;
  }
  return r;
}

bool probe_reachable(const std::string& probe, const ProbeReach& reach) {
  const auto& [handles, shm, host] = reach;
  auto starts = [&](std::string_view prefix) { return probe.rfind(prefix, 0) == 0; };
  if (starts("exchange: ") || starts("peer shard table: ") || starts("sim: access refused") || starts("sim: fd "))
    return handles;
  if (starts("sim: shm ") || starts("sim: /dev/shm ")) return shm;
  if (starts("lookup: a host table")) return host;
  return true;
}

int run_fuzz(FuzzFlags& flags) {
  if (const Status bad = read_numbers(flags); !bad.is_ok()) {
    std::cerr << "error: " << bad.message() << "\n";
    if (flags.json) std::cout << dump_json(error_document("fuzz", bad)) << "\n";
    return 2;
  }
  auto target = harness::load_swarm_target(flags.file, flags.sites);
  if (target.is_ok() && target->deployment && harness::swarm_sites_expected(target.value()).empty()) {
    harness::SwarmTarget every_site = target.value();
    every_site.sites.clear();
    std::string names;
    for (sim::FaultSite site : harness::swarm_sites_expected(every_site))
      names += fmt::format("{}{}", names.empty() ? "" : ", ", sim::fault_site_name(site));
    target = invalid_argument(fmt::format(
        "--sites {}: the placements plan gives {} never reach them; drop --sites or name sites it reaches: {}",
        excerpt(flags.sites), excerpt(flags.file, 200), names));
  }
  // Output paths refused before any seed runs (write_output_file checks
  // them again when it writes).
  for (const auto& [path, what] : {std::pair{flags.trace, "the --trace file"}, {flags.timeline, "the --timeline SVG"},
                                   {flags.junitxml, "the JUnit XML report"}})
    if (target.is_ok() && !path.empty())
      if (Status usable = check_output_path(path, what); !usable.is_ok()) target = usable;
  if (target.is_ok() && !flags.engine.empty()) {
    if (!target->deployment) {
      target = invalid_argument("--engine: plans a deployment's file by an engine's rules; give --file too");
    } else if (auto id = parse_engine_choice(flags.engine, "--engine"); !id.is_ok()) {
      target = id.status();
    } else {
      target->deployment->engine.profile = id->id;
      target->deployment->engine.variant = id->variant;
      target->engine = flags.engine;
    }
  }
  if (target.is_ok() && !flags.host_layout.empty()) {
    if (!target->deployment) {
      target = invalid_argument(fmt::format("--host-layout {}: sets the host layout of a deployment's file; give --file too",
                                            excerpt(flags.host_layout)));
    } else {
      target->deployment->config.host_layout = flags.host_layout;
      target->host_layout = flags.host_layout;
      // A name the engine lacks is bad input, said once (not a refusal on every seed).
      const EngineProfile& engine =
          engine_profile(target->deployment->engine.profile, target->deployment->engine.variant);
      if (auto layout = host_layout_of(engine, target->deployment->config); !layout.is_ok())
        target = invalid_argument(fmt::format("--host-layout {}: {}", excerpt(flags.host_layout), layout.status().message()));
    }
  }
  if (target.is_ok() && !flags.without.empty()) {
    if (!target->deployment) {
      target = invalid_argument(fmt::format("--without {}: leaves settings out of a deployment's file; give --file too",
                                            excerpt(flags.without)));
    } else {
      for (const std::string& name : comma_list(flags.without)) {
        if (Status dropped = drop_engine_setting(*target->deployment, name); !dropped.is_ok()) {
          target = invalid_argument(fmt::format("--without: {}", dropped.message()));
          break;
        }
        target->without.push_back(name);
      }
    }
  }
  if (target.is_ok() && flags.compare_engines) {
    // Each engine runs its own plan: flags that pick one engine, or write one
    // run's files, have no single run to apply to.
    std::string clash;
    for (const auto& [given, name] : {std::pair{!flags.engine.empty(), "--engine"}, {!flags.host_layout.empty(), "--host-layout"}, {!flags.without.empty(), "--without"},
                                      {!flags.emit_seed_text.empty(), "--emit-scenario"}, {!flags.trace.empty(), "--trace"},
                                      {!flags.timeline.empty(), "--timeline"}, {!flags.junitxml.empty(), "--junitxml"},
                                      {flags.json, "--json"}, {flags.verbose, "--verbose"}})
      if (given) clash += fmt::format("{}{}", clash.empty() ? "" : ", ", name);
    if (!target->deployment)
      target = invalid_argument("--compare-engines: runs a deployment's file under each engine; give --file too");
    else if (!clash.empty())
      target = invalid_argument(fmt::format("--compare-engines runs every engine, each on its own plan; {} names one "
                                            "run: drop it, or run `fuzz --file F --engine NAME` with it",
                                            clash));
  }
  if (!target.is_ok()) {
    std::cerr << "error: " << target.status().message() << "\n";
    if (flags.json) std::cout << dump_json(error_document("fuzz", target.status())) << "\n";
    return 2;
  }
  if (flags.compare_engines)
    return fuzz_compare_engines(target.value(), flags.seed, flags.seeds, flags.check_determinism, std::cout);
  if (!flags.emit_seed_text.empty()) return emit_scenario(flags, target.value());
  if (flags.verbose && !flags.json) {
    for (int i = 0; i < flags.seeds; ++i) {
      auto r = harness::run_swarm_seed(flags.seed + static_cast<uint64_t>(i), flags.check_determinism, target.value());
      std::cout << fmt::format("seed {}: {} {:016x} {}\n  {}\n", r.seed, r.passed ? "pass" : "FAIL", r.trace_hash,
                               r.outcome, r.description);
    }
  }
  harness::SwarmReport report;
  {
    Progress progress("fuzz", "seeds", static_cast<uint64_t>(flags.seeds),
                      flags.progress ? ProgressMode::kAlways : ProgressMode::kAuto);
    report = harness::run_swarm(flags.seed, flags.seeds, flags.check_determinism,
                            [&](int done) { progress.update(static_cast<uint64_t>(done)); }, target.value());
  }
  if (!flags.trace.empty() || !flags.timeline.empty()) {
    // The run again, deterministic in its seed, this time keeping its timeline.
    const uint64_t drawn_seed = report.failures.empty() ? flags.seed : report.failures.front().seed;
    harness::SwarmCase drawn = harness::draw_swarm_case(drawn_seed, target.value());
    drawn.job.keep_timeline = true;
    const harness::EmulatedOutcome run = harness::run_emulated_job(drawn.job);
    if (const Status written = harness::write_run_drawings(run, fmt::format("fuzz seed {}", drawn_seed), flags.trace,
                                                       flags.timeline);
        !written.is_ok()) {
      std::cerr << "error: " << written.message() << "\n";
      return 2;
    }
  }
  const auto never = report.sites_never_fired();
  if (!flags.junitxml.empty())
    if (const Status written =
            write_output_file(flags.junitxml, harness::swarm_junit_xml(report, flags.file), "the JUnit XML report");
        !written.is_ok()) {
      std::cerr << "error: " << written.message() << "\n";
      return 2;
    }
  if (flags.json) {
    std::cout << dump_json(harness::swarm_report_json(report)) << "\n";
    return report.passed() ? 0 : 1;
  }

  if (flags.brief) {
    std::cout << report.outcome_table();
  } else {
    std::cout << report.fault_site_table() << "\n" << report.coverage_table() << "\n" << report.outcome_table()
              << "\n";
  }
  for (const auto& f : report.failures) {
    std::cout << fmt::format("FAIL seed {}: {}\n  job: {}\n", f.seed, f.outcome, f.description);
    for (const auto& v : f.violations) std::cout << "  - " << v << "\n";
    std::cout << "  reproduce: " << f.reproduction << "\n";
  }
  if (!never.empty()) {
    std::string names;
    for (sim::FaultSite site : never) names += fmt::format("{}{}", names.empty() ? "" : ", ", sim::fault_site_name(site));
    std::cout << fmt::format("fault sites that never fired in {} seeds: {}{}\n", flags.seeds, names,
                             flags.seeds >= harness::kEverySiteSweepSeeds
                                 ? ": the sweep does not test them (this fails the sweep)"
                                 : fmt::format(" (only a sweep of {} or more seeds must fire every site)",
                                               harness::kEverySiteSweepSeeds));
  }
  if (auto unhit = report.probes_never_hit(); !unhit.empty() && !flags.brief) {
    // Around a deployment, only the probes its placements can reach: the rest are not this sweep's to hit.
    size_t unreachable = 0;
    if (target->deployment) {
      const size_t before = unhit.size();
      const ProbeReach reach = probe_reach(*target->deployment);
      std::erase_if(unhit, [&](const std::string& p) { return !probe_reachable(p, reach); });
      unreachable = before - unhit.size();
    }
    std::string names;
    for (const std::string& probe : unhit) names += fmt::format("{}{}", names.empty() ? "" : "; ", probe);
    if (!unhit.empty())
      std::cout << fmt::format("coverage probes never hit in {} seeds ({} of {}{}): {}\n", flags.seeds, unhit.size(),
                               unhit.size() + report.coverage.size(),
                               unreachable ? fmt::format(" this deployment can reach; {} more it cannot", unreachable)
                                           : std::string(),
                               names);
  }
  std::cout << fmt::format("fuzz: {} seeds from {}{}{}{}: {} failed; {} of {} fault sites{} fired; {:.1f} s\n",
                           flags.seeds, flags.seed, flags.file.empty() ? "" : " around " + flags.file,
                           flags.engine.empty() ? "" : " under " + flags.engine,
                           flags.check_determinism ? ", each run twice" : "", report.failures.size(),
                           report.expected_sites.size() - never.size(), report.expected_sites.size(),
                           report.expected_sites.size() == sim::kFaultSiteCount ? "" : " aimed at", 
                           report.elapsed_ms / 1000.0);
  return report.passed() ? 0 : 1;
}

CommandRegistration fuzz_registration("40-fuzz", [](CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<FuzzFlags>();
  CLI::App* cmd = app.add_subcommand(
      "fuzz", "Swarm mode: draw topology, config and faults from each seed, run on the emulator, check invariants");
  CLI::Option* seeds = cmd->add_option("--seeds", flags->seeds_text, "how many seeds (default 100)");
  cmd->add_option("--seed", flags->seed_text, "the first seed (default 1), or a range of them (1-20)");
  cmd->add_option("--file", flags->file,
                  "a deployment or scenario file: its topology and config held fixed, the seed drawing faults, "
                  "interleavings and timeouts");
  cmd->add_option("--emit-scenario", flags->emit_seed_text,
                  "print seed SEED's drawn case as a scenario file (its outcome as the expectation), checked to "
                  "rerun alone with the same trace hash");
  cmd->add_option("--trace", flags->trace,
                  "write the first failing seed's run (else the first seed's) as a Chrome/Perfetto trace");
  cmd->add_option("--timeline", flags->timeline, "write the same run as SVG swimlanes");
  cmd->add_option("--junitxml", flags->junitxml,
                  "write a JUnit XML report (a testcase per seed; a failure holds the violations and the reproduce "
                  "line) for a CI dashboard");
  cmd->add_option("--sites", flags->sites, "comma-separated fault sites to draw faults at (default: every site)");
  cmd->add_option("--engine", flags->engine,
                  fmt::format("whose rules plan the --file's deployment: {} (default: the file's engine.name)",
                              engine_names_text()));
  cmd->add_flag("--brief", flags->brief, "print the outcomes, failures and the summary line alone");
  cmd->add_option("--host-layout", flags->host_layout,
                  "the engine's host layout for the --file's deployment, by its own name (plan --host-layout's)");
  cmd->add_option("--without", flags->without,
                  "engine settings to leave out of the --file's deployment, comma-separated (peer_shards, thp_packing, "
                  "embedding_across_dp, host_layout, dp_shared_memory), as plan --compare-engines plans an engine "
                  "that lacks them");
  cmd->add_flag("--compare-engines", flags->compare_engines,
                "run the --file's deployment under each engine's plan (another host layout where its default "
                "cannot run there, or without a setting it lacks, as plan --compare-engines shows), two lines an "
                "engine");
  cmd->add_flag("--check-determinism", flags->check_determinism, "run each seed twice and compare trace hashes");
  cmd->add_flag("--verbose", flags->verbose, "print each seed's job and outcome first");
  cmd->add_flag("--json", flags->json, "print a machine-readable JSON document");
  cmd->add_flag("--progress", flags->progress,
                "show progress on stderr even when it is not a terminal (also ENGRAMLAB_PROGRESS=1)");
  cmd->callback([flags, seeds, &exit_code]() {
    flags->seeds_given = seeds->count() > 0;
    exit_code = run_fuzz(*flags);
  });
});

}  // namespace
}  // namespace engram::app
