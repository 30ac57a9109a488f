// `engramlab fuzz --seeds N [--seed S] [--check-determinism] [--verbose]`:
// swarm mode (harness/swarm.h). Each seed draws a job and checks the invariants;
// the end shows which fault sites fired, the coverage probes and the
// outcomes. Exit codes: 0 every seed held and (for a sweep of 200 seeds or
// more) every fault site fired; 1 otherwise; 2 bad flags.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "apps/command_registry.h"
#include "harness/swarm.h"

namespace engram::app {
namespace {

struct FuzzFlags {
  int seeds = 100;
  uint64_t seed = 1;
  bool check_determinism = false;
  bool verbose = false;  // one line per seed
};

int run_fuzz(const FuzzFlags& flags) {
  if (flags.seeds < 1) {
    std::cerr << fmt::format("error: --seeds: {} is not a positive count; write e.g. --seeds 2000\n", flags.seeds);
    return 2;
  }
  if (flags.verbose) {
    for (int i = 0; i < flags.seeds; ++i) {
      auto r = sim::run_swarm_seed(flags.seed + static_cast<uint64_t>(i), flags.check_determinism);
      std::cout << fmt::format("seed {}: {} {:016x} {}\n  {}\n", r.seed, r.passed ? "pass" : "FAIL", r.trace_hash,
                               r.outcome, r.description);
    }
  }
  sim::SwarmReport report = sim::run_swarm(flags.seed, flags.seeds, flags.check_determinism);

  std::cout << report.fault_site_table() << "\n" << report.coverage_table() << "\n" << report.outcome_table() << "\n";
  for (const auto& f : report.failures) {
    std::cout << fmt::format("FAIL seed {}: {}\n  job: {}\n", f.seed, f.outcome, f.description);
    for (const auto& v : f.violations) std::cout << "  - " << v << "\n";
    std::cout << "  reproduce: " << f.reproduction << "\n";
  }
  const auto never = report.sites_never_fired();
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
  cmd->add_option("--seeds", flags->seeds, "how many seeds (default 100)");
  cmd->add_option("--seed", flags->seed, "the first seed (default 1)");
  cmd->add_flag("--check-determinism", flags->check_determinism, "run each seed twice and compare trace hashes");
  cmd->add_flag("--verbose", flags->verbose, "print each seed's job and outcome first");
  cmd->callback([flags, &exit_code]() { exit_code = run_fuzz(*flags); });
});

}  // namespace
}  // namespace engram::app
