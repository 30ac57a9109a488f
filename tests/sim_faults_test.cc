// Faults: what a checkpoint counts and strikes, with and without a fault
// that could strike there.
#include "sim/faults.h"

#include <gtest/gtest.h>

#include <string_view>

namespace engram::sim {
namespace {

constexpr int kRanks = 3;
constexpr int kVisitsPerRank = 5;

// Every rank passes `kVisitsPerRank` checkpoints, alternating two names;
// returns how many struck.
int pass_checkpoints(Faults& faults) {
  int struck = 0;
  for (int visit = 0; visit < kVisitsPerRank; ++visit)
    for (int rank = 0; rank < kRanks; ++rank)
      struck += faults.at_checkpoint(visit % 2 == 0 ? kCollectiveCheckpoint : std::string_view("import"), rank) ? 1 : 0;
  return struck;
}

TEST(SimFaults, CheckpointsWithNothingToStrikeStillCountAsReached) {
  FaultPlan plan;
  plan.rate[static_cast<size_t>(FaultSite::kImport)] = 1.0;  // a step site: no checkpoint draws for it
  Faults faults(plan, 7, kRanks);
  EXPECT_EQ(pass_checkpoints(faults), 0);
  const FaultReport report = faults.report();
  for (FaultSite site : {FaultSite::kRankDeath, FaultSite::kHang, FaultSite::kSlow}) {
    EXPECT_EQ(report.reached(site), static_cast<uint64_t>(kRanks * kVisitsPerRank)) << fault_site_name(site);
    EXPECT_EQ(report.fired(site), 0u);
  }
  EXPECT_EQ(report.reached(FaultSite::kImport), 0u);  // step sites are reached by fire(), not checkpoints
  EXPECT_TRUE(report.fired_events.empty());
}

TEST(SimFaults, APlannedProcessFaultCountsTheSameAndStrikesOnItsVisit) {
  FaultPlan plan;
  PlannedFault slow;
  slow.site = FaultSite::kSlow;
  slow.rank = 1;
  slow.occurrence = 2;
  slow.at = "import";
  slow.delay_us = 250;
  plan.planned.push_back(slow);
  Faults faults(plan, 7, kRanks);
  int struck = 0;
  for (int visit = 0; visit < kVisitsPerRank; ++visit)
    for (int rank = 0; rank < kRanks; ++rank) {
      const auto fault = faults.at_checkpoint(visit % 2 == 0 ? kCollectiveCheckpoint : std::string_view("import"), rank);
      if (!fault) continue;
      ++struck;
      // Rank 1's second "import" is its fourth checkpoint (visit 3).
      EXPECT_EQ(rank, 1);
      EXPECT_EQ(visit, 3);
      EXPECT_EQ(fault->site, FaultSite::kSlow);
      EXPECT_EQ(fault->delay_us, 250u);
    }
  EXPECT_EQ(struck, 1);
  const FaultReport report = faults.report();
  for (FaultSite site : {FaultSite::kRankDeath, FaultSite::kHang, FaultSite::kSlow})
    EXPECT_EQ(report.reached(site), static_cast<uint64_t>(kRanks * kVisitsPerRank)) << fault_site_name(site);
  EXPECT_EQ(report.fired(FaultSite::kSlow), 1u);
  EXPECT_TRUE(report.never_fired.empty());
}

TEST(SimFaults, AProcessFaultRateDrawsAtEveryCheckpoint) {
  FaultPlan plan;
  plan.rate[static_cast<size_t>(FaultSite::kRankDeath)] = 1.0;
  Faults faults(plan, 7, kRanks);
  EXPECT_EQ(pass_checkpoints(faults), kRanks * kVisitsPerRank);
  EXPECT_EQ(faults.report().fired(FaultSite::kRankDeath), static_cast<uint64_t>(kRanks * kVisitsPerRank));
}

}  // namespace
}  // namespace engram::sim
