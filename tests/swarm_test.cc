// Swarm mode: a fixed-seed sweep holds every invariant, runs each seed twice
// with the same trace, and makes every fault site fire; draws depend on the
// seed alone.
#include "harness/swarm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/coverage_probe.h"
#include "core/base/rerun_command.h"
#include "harness/emulated_scenario.h"
#include "tests/engramlab_rerun_suites.h"

namespace engram::sim {
namespace {

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
// Reproduction lines name the built engramlab, not this test binary.
[[maybe_unused]] const bool kRerunLinesNameEngramlab = testing::rerun_lines_name_engramlab("Swarm");

TEST(Swarm, FixedSeedSweepHoldsEveryInvariantDeterministically) {
  // The sweep size the fuzz command holds to "every site fires".
  harness::SwarmReport report = harness::run_swarm(1, harness::kEverySiteSweepSeeds, /*check_determinism=*/true);
  std::string why;
  for (const auto& f : report.failures) {
    why += "\nseed " + std::to_string(f.seed) + ": " + f.description;
    for (const auto& v : f.violations) why += "\n  - " + v;
    why += "\n  reproduce: " + f.reproduction;
  }
  EXPECT_TRUE(report.failures.empty()) << why;
  EXPECT_TRUE(report.sites_never_fired().empty()) << report.fault_site_table();
  EXPECT_TRUE(report.passed());
  // The sweep covers more than one kind of outcome: successes of several
  // placements and failures.
  int ok_kinds = 0, error_kinds = 0;
  for (const auto& [outcome, n] : report.outcomes) (outcome.rfind("ok ", 0) == 0 ? ok_kinds : error_kinds)++;
  EXPECT_GE(ok_kinds, 4) << report.outcome_table();
  EXPECT_GE(error_kinds, 4) << report.outcome_table();
}

// Above TP1 the host layouts hold TP slices; the sweep's first seeds reach
// them with and without sequence parallelism, and with a padded 7-head
// table, and those runs succeed with lookups equal to the direct lookup.
TEST(Swarm, DrawsCoverTpSlicedHostLayoutsAndTheyHold) {
  int sliced = 0, sequence_parallel = 0, seven_heads = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    const harness::SwarmCase c = harness::draw_swarm_case(seed);
    const Deployment& d = c.job.deployment;
    if (d.layout.tp == 1 || !d.config.cpu_offload || d.config.peer_shards) continue;
    const harness::SwarmSeedResult r = harness::run_swarm_seed(seed, false);
    EXPECT_TRUE(r.violations.empty()) << "seed " << seed << ": " << c.description;
    if (r.outcome.rfind("ok host_", 0) != 0) continue;
    ++sliced;
    sequence_parallel += d.config.sequence_parallel;
    seven_heads += c.job.lookup.model == "tiny-7h";
  }
  EXPECT_GE(sliced, 10);
  EXPECT_GE(sequence_parallel, 3);
  EXPECT_GE(seven_heads, 2);
}

// The swarm draws step schedules (`steps: drawn`: chunks, decode, cached
// prefixes, handovers, ragged verify blocks, padding) and context-parallel
// prefill (prefill_cp dividing dp); where such a run succeeds its ranks
// checked ids against the accepted sequence hashed whole, and none differed.
TEST(Swarm, DrawsStepSchedulesAndCpPrefillAndTheirIdsHold) {
  int steps_checked = 0, cp_checked = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const harness::SwarmCase c = harness::draw_swarm_case(seed);
    const bool steps = c.job.lookup.steps.drawn;
    const bool cp = c.job.deployment.layout.prefill_cp > 1;
    if (!steps && !cp) continue;
    EXPECT_NE(c.description.find(steps ? "steps=drawn" : "prefill_cp="), std::string::npos) << c.description;
    const harness::EmulatedOutcome out = harness::run_emulated_job(c.job);
    uint64_t checked = 0;
    for (const harness::RankOutcome& r : out.ranks) {
      EXPECT_EQ(r.ids_mismatch, "") << "seed " << seed << ": " << c.description;
      checked += r.ids_checked;
    }
    if (out.error) continue;
    (steps ? steps_checked : cp_checked) += checked > 0;
  }
  EXPECT_GE(steps_checked, 10);
  EXPECT_GE(cp_checked, 10);
}

TEST(Swarm, DrawsDependOnTheSeedAlone) {
  std::set<std::string> descriptions;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    EXPECT_EQ(harness::draw_swarm_case(seed).description, harness::draw_swarm_case(seed).description);
    descriptions.insert(harness::draw_swarm_case(seed).description);
  }
  EXPECT_GE(descriptions.size(), 45u);
  auto a = harness::run_swarm_seed(17, false);
  auto b = harness::run_swarm_seed(17, false);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.outcome, b.outcome);
  EXPECT_EQ(a.reproduction, kEngramlab + " fuzz --seed 17 --seeds 1");
  EXPECT_EQ(harness::run_swarm_seed(17, true).reproduction, kEngramlab + " fuzz --seed 17 --seeds 1 --check-determinism");
}

// Three seeds cannot fire every site (the sweep needs kEverySiteSweepSeeds):
// the unfired ones are named in the table, and a sweep that small passes
// on its seeds alone.
TEST(Swarm, ASmallSweepReportsUnfiredSitesWithoutFailing) {
  harness::SwarmReport report = harness::run_swarm(5, 3, false);
  EXPECT_EQ(report.seed_count, 3);
  const std::vector<sim::FaultSite> never = report.sites_never_fired();
  ASSERT_FALSE(never.empty()) << report.fault_site_table();
  const std::string table = report.fault_site_table();
  EXPECT_NE(table.find("NEVER FIRED"), std::string::npos) << table;
  for (sim::FaultSite site : never) {  // each unfired site's own row says so
    const size_t row = table.find("\n" + std::string(sim::fault_site_name(site)) + " ");
    ASSERT_NE(row, std::string::npos) << table;
    EXPECT_NE(table.substr(row + 1, table.find('\n', row + 1) - row - 1).find("NEVER FIRED"), std::string::npos) << table;
  }
  EXPECT_TRUE(report.failures.empty()) << report.outcome_table();
  EXPECT_TRUE(report.passed()) << "unfired sites fail only a sweep of " << harness::kEverySiteSweepSeeds << " or more";
}

// Probes register before main, so one never reached is still listed: from
// the core, the emulator and the harness alike, before any seed runs.
TEST(Swarm, ProbesAreRegisteredBeforeAnyRun) {
  const std::vector<std::string_view> registered = registered_coverage_probes();
  EXPECT_TRUE(std::ranges::is_sorted(registered));
  EXPECT_EQ(std::ranges::adjacent_find(registered), registered.end()) << "each name once";
  for (std::string_view probe : {"exchange: cleanup after import failure", "exchange: cleanup after another step's failure",
                                 "peer shard table: teardown after a failed fill", "sim: shm ENOSPC",
                                 "sim: fd send across hosts refused", "lookup: a host table read by the device"})
    EXPECT_TRUE(std::ranges::binary_search(registered, probe)) << probe;
}

// A sweep of a few seeds names the probes it never hit; every probe it hit
// is a registered one, and hit plus never hit is every registered probe.
TEST(Swarm, ASmallSweepNamesTheProbesItNeverHit) {
  const std::vector<std::string_view> registered = registered_coverage_probes();
  harness::SwarmReport report = harness::run_swarm(1, 3, false);
  const std::vector<std::string> never = report.probes_never_hit();
  EXPECT_FALSE(never.empty());
  // Only an exchange failing at a step nobody names reaches this one.
  EXPECT_NE(std::ranges::find(never, "exchange: cleanup after another step's failure"), never.end());
  for (const auto& [probe, hits] : report.coverage) {
    EXPECT_TRUE(std::ranges::binary_search(registered, std::string_view(probe))) << "hit, not registered: " << probe;
    EXPECT_EQ(std::ranges::find(never, probe), never.end()) << "hit and never hit: " << probe;
  }
  for (const std::string& probe : never)
    EXPECT_TRUE(std::ranges::binary_search(registered, std::string_view(probe))) << probe;
  EXPECT_EQ(never.size() + report.coverage.size(), registered.size());
}

}  // namespace
}  // namespace engram::sim
