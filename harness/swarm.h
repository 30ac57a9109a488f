// Swarm mode (docs/design.md section 6): each seed draws a whole job (topology,
// layout, config, faults, lookup) and runs it on the emulator the way a
// scenario runs (harness/emulated_scenario.h), then checks invariants that must
// hold whatever was drawn:
//   - nothing in the ledger after any outcome;
//   - the ranks of one host that took a host placement decided alike;
//   - every failed rank's error names a rank and a step;
//   - wherever the run succeeded, every lookup equals the direct lookup;
//   - the runtime placed every rank as `plan` did (and a plan refusal fails
//     every rank with the same kind), and warned only as plan warned;
//   - with check_determinism, a second run gives the same trace hash and
//     the same per-rank outcomes.
// A failing seed carries one line that reproduces it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/faults.h"
#include "harness/emulated_scenario.h"

namespace engram::harness {

struct SwarmCase {
  EmulatedJob job;
  std::string description;  // one line: hosts, layout, config, faults
};

// What a sweep aims at (`fuzz --file F --sites a,b`): the user's deployment
// held fixed (the seed then varies only faults, interleavings and timeouts),
// and the fault sites drawn. Empty: everything is drawn, as before.
struct SwarmTarget {
  std::string file;                      // absolute; names the target in reproduction lines
  std::string file_text;                 // the file as read, once (emitted scenarios copy its words)
  std::optional<Deployment> deployment;  // as written; absent: drawn from the seed
  std::optional<ScenarioLookup> lookup;  // the file's own lookup, when it is a scenario
  bool timeouts_written = false;         // the file sets timeouts: they are not drawn
  std::vector<sim::FaultSite> sites;          // the sites faults are drawn at; empty: every site
  std::string engine;  // `fuzz --engine NAME`: set on the deployment, named in reproduction lines; empty: the file's
  // `fuzz --host-layout NAME`: set on the deployment's config, named in
  // reproduction lines; empty: the file's.
  std::string host_layout;
  // `fuzz --without a,b`: engine settings left out of the deployment (as
  // plan --compare-engines plans an engine that lacks them), named in
  // reproduction lines.
  std::vector<std::string> without;
};

// Deterministic in `seed` and the target alone.
SwarmCase draw_swarm_case(uint64_t seed, const SwarmTarget& target = {});

// The sites a sweep over `target` must fire: its --sites (every site when it
// names none), less the step sites its deployment's placements never reach.
std::vector<sim::FaultSite> swarm_sites_expected(const SwarmTarget& target);

struct SwarmSeedResult {
  uint64_t seed = 0;
  bool passed = true;
  std::vector<std::string> violations;
  std::string description;
  std::string outcome;       // "ok host_shared", "error unavailable (step import)", ...
  std::string reproduction;  // /abs/engramlab fuzz --seed S --seeds 1 [--check-determinism] (rerun_command)
  uint64_t trace_hash = 0;
  sim::FaultReport faults;
  std::map<std::string, uint64_t, std::less<>> coverage;
};

// The arguments of the line that reruns one seed of a sweep over `target`.
std::vector<std::string> swarm_rerun_args(uint64_t seed, bool check_determinism, const SwarmTarget& target);

SwarmSeedResult run_swarm_seed(uint64_t seed, bool check_determinism, const SwarmTarget& target = {});

// A sweep of at least this many seeds must make every fault site fire
// (at 200 the narrowest site, import, was left to chance).
inline constexpr int kEverySiteSweepSeeds = 500;

struct SwarmReport {
  uint64_t first_seed = 0;
  int seed_count = 0;
  bool check_determinism = false;
  std::vector<SwarmSeedResult> failures;
  std::array<uint64_t, sim::kFaultSiteCount> fired{};        // fault firings, summed over seeds
  std::array<uint64_t, sim::kFaultSiteCount> reached{};
  std::array<int, sim::kFaultSiteCount> seeds_fired{};       // seeds in which the site fired
  std::map<std::string, std::pair<uint64_t, int>, std::less<>> coverage;  // probe -> (hits, seeds)
  std::map<std::string, int, std::less<>> outcomes;     // outcome -> seeds
  std::vector<sim::FaultSite> expected_sites;                // swarm_sites_expected(target)
  double elapsed_ms = 0;

  // Of the expected sites, those that never fired.
  std::vector<sim::FaultSite> sites_never_fired() const;
  // Every coverage probe linked into this program that no seed hit, by name
  // (core/base/coverage_probe.h registers them before main).
  std::vector<std::string> probes_never_hit() const;
  // No failing seed, and (for a sweep of kEverySiteSweepSeeds or more) every expected site fired.
  bool passed() const;
  std::string fault_site_table() const;
  std::string coverage_table() const;
  std::string outcome_table() const;
};

// The most seeds one sweep runs (`fuzz --seeds`, engramlab.fuzz).
inline constexpr int kMaxSwarmSeeds = 10'000'000;

// `on_seed_done(done)` after each seed (progress reporting); may be empty.
SwarmReport run_swarm(uint64_t first_seed, int seed_count, bool check_determinism,
                      const std::function<void(int done)>& on_seed_done = {}, const SwarmTarget& target = {});

}  // namespace engram::harness
