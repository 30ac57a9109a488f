// Swarm mode: a fixed-seed sweep holds every invariant, runs each seed twice
// with the same trace, and makes every fault site fire; draws depend on the
// seed alone.
#include "harness/swarm.h"

#include <gtest/gtest.h>

#include <set>

namespace engram::sim {
namespace {

TEST(Swarm, FixedSeedSweepHoldsEveryInvariantDeterministically) {
  // The sweep size the fuzz command holds to "every site fires".
  SwarmReport report = run_swarm(1, kEverySiteSweepSeeds, /*check_determinism=*/true);
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
    const SwarmCase c = draw_swarm_case(seed);
    const Deployment& d = c.job.deployment;
    if (d.layout.tp == 1 || !d.config.cpu_offload || d.config.peer_shards) continue;
    const SwarmSeedResult r = run_swarm_seed(seed, false);
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

TEST(Swarm, DrawsDependOnTheSeedAlone) {
  std::set<std::string> descriptions;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    EXPECT_EQ(draw_swarm_case(seed).description, draw_swarm_case(seed).description);
    descriptions.insert(draw_swarm_case(seed).description);
  }
  EXPECT_GE(descriptions.size(), 45u);
  auto a = run_swarm_seed(17, false);
  auto b = run_swarm_seed(17, false);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.outcome, b.outcome);
  EXPECT_EQ(a.reproduction, "engramlab fuzz --seed 17 --seeds 1");
}

TEST(Swarm, ASmallSweepReportsUnfiredSitesWithoutFailing) {
  SwarmReport report = run_swarm(5, 3, false);
  EXPECT_EQ(report.seed_count, 3);
  if (!report.sites_never_fired().empty()) {
    EXPECT_NE(report.fault_site_table().find("NEVER FIRED"), std::string::npos);
  }
  EXPECT_EQ(report.passed(), report.failures.empty());
}

}  // namespace
}  // namespace engram::sim
