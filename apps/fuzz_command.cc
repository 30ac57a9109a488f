// `engramlab fuzz --seeds N [--seed S] [--check-determinism] [--verbose]`:
// swarm mode (harness/swarm.h). Each seed draws a job and checks the invariants;
// the end shows which fault sites fired, the coverage probes and the
// outcomes. Exit codes: 0 every seed held and (for a sweep of 500 seeds or
// more) every fault site fired; 1 otherwise; 2 bad flags.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>

#include "apps/command_registry.h"
#include "apps/flag_numbers.h"
#include "core/base/json_output.h"
#include "core/base/progress.h"
#include "harness/swarm.h"

namespace engram::app {
namespace {

struct FuzzFlags {
  std::string seeds_text = "100";
  std::string seed_text = "1";
  int seeds = 0;       // from seeds_text
  uint64_t seed = 0;   // from seed_text
  bool check_determinism = false;
  bool verbose = false;  // one line per seed
  bool json = false;
  bool progress = false;
};

Json seed_json(const sim::SwarmSeedResult& r) {
  return {{"seed", r.seed},
          {"passed", r.passed},
          {"outcome", r.outcome},
          {"job", r.description},
          {"trace_hash", fmt::format("{:016x}", r.trace_hash)},
          {"violations", r.violations},
          {"reproduce", r.reproduction}};
}

Json fuzz_json(const FuzzFlags& flags, const sim::SwarmReport& report) {
  Json j = json_document("fuzz");
  j["first_seed"] = flags.seed;
  j["seeds"] = flags.seeds;
  j["check_determinism"] = flags.check_determinism;
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

constexpr int kMaxSeeds = 10'000'000;

// The whole-number flags, as every command reads them.
Status read_numbers(FuzzFlags& flags) {
  ENGRAM_ASSIGN_OR_RETURN(flags.seeds, whole_number_flag<int>("--seeds", flags.seeds_text, 1, kMaxSeeds));
  ENGRAM_ASSIGN_OR_RETURN(flags.seed, whole_number_flag<uint64_t>("--seed", flags.seed_text, 0, UINT64_MAX));
  return Status::ok();
}

int run_fuzz(FuzzFlags& flags) {
  if (const Status bad = read_numbers(flags); !bad.is_ok()) {
    std::cerr << "error: " << bad.message() << "\n";
    if (flags.json) std::cout << dump_json(error_document("fuzz", bad)) << "\n";
    return 2;
  }
  if (flags.verbose && !flags.json) {
    for (int i = 0; i < flags.seeds; ++i) {
      auto r = sim::run_swarm_seed(flags.seed + static_cast<uint64_t>(i), flags.check_determinism);
      std::cout << fmt::format("seed {}: {} {:016x} {}\n  {}\n", r.seed, r.passed ? "pass" : "FAIL", r.trace_hash,
                               r.outcome, r.description);
    }
  }
  sim::SwarmReport report;
  {
    Progress progress("fuzz", "seeds", static_cast<uint64_t>(flags.seeds),
                      flags.progress ? ProgressMode::kAlways : ProgressMode::kAuto);
    report = sim::run_swarm(flags.seed, flags.seeds, flags.check_determinism,
                            [&](int done) { progress.update(static_cast<uint64_t>(done)); });
  }
  const auto never = report.sites_never_fired();
  if (flags.json) {
    std::cout << dump_json(fuzz_json(flags, report)) << "\n";
    return report.passed() ? 0 : 1;
  }

  std::cout << report.fault_site_table() << "\n" << report.coverage_table() << "\n" << report.outcome_table() << "\n";
  for (const auto& f : report.failures) {
    std::cout << fmt::format("FAIL seed {}: {}\n  job: {}\n", f.seed, f.outcome, f.description);
    for (const auto& v : f.violations) std::cout << "  - " << v << "\n";
    std::cout << "  reproduce: " << f.reproduction << "\n";
  }
  if (!never.empty()) {
    std::string names;
    for (sim::FaultSite site : never) names += fmt::format("{}{}", names.empty() ? "" : ", ", sim::fault_site_name(site));
    std::cout << fmt::format("fault sites that never fired in {} seeds: {}{}\n", flags.seeds, names,
                             flags.seeds >= sim::kEverySiteSweepSeeds
                                 ? ": the sweep does not test them (this fails the sweep)"
                                 : fmt::format(" (only a sweep of {} or more seeds must fire every site)",
                                               sim::kEverySiteSweepSeeds));
  }
  std::cout << fmt::format("fuzz: {} seeds from {}{}: {} failed; {} of {} fault sites fired; {:.1f} s\n", flags.seeds,
                           flags.seed, flags.check_determinism ? ", each run twice" : "", report.failures.size(),
                           sim::kFaultSiteCount - static_cast<int>(never.size()), sim::kFaultSiteCount,
                           report.elapsed_ms / 1000.0);
  return report.passed() ? 0 : 1;
}

CommandRegistration reg("40-fuzz", [](CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<FuzzFlags>();
  CLI::App* cmd = app.add_subcommand(
      "fuzz", "Swarm mode: draw topology, config and faults from each seed, run on the emulator, check invariants");
  cmd->add_option("--seeds", flags->seeds_text, "how many seeds (default 100)");
  cmd->add_option("--seed", flags->seed_text, "the first seed (default 1)");
  cmd->add_flag("--check-determinism", flags->check_determinism, "run each seed twice and compare trace hashes");
  cmd->add_flag("--verbose", flags->verbose, "print each seed's job and outcome first");
  cmd->add_flag("--json", flags->json, "print a machine-readable JSON document");
  cmd->add_flag("--progress", flags->progress,
                "show progress on stderr even when it is not a terminal (also ENGRAMLAB_PROGRESS=1)");
  cmd->callback([flags, &exit_code]() { exit_code = run_fuzz(*flags); });
});

}  // namespace
}  // namespace engram::app
