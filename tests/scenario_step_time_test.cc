// The emulator keeps time: each lookup step advances a rank's clock by the
// step model's time for that rank (sim/sim_step_clock.h, priced by
// harness/emulated_step_pricer.h from core/placements/step_cost.h), so a
// slow NVLink shows as that rank's step time, above the others' by the
// model's amount, and a straggler as its peers' waiting in the step's
// collectives; expect.step_time_us_max passes or fails on it, naming the
// rank and the times; the same seed gives the same times.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/model/table_spec.h"
#include "core/placements/placement.h"
#include "core/placements/step_cost.h"
#include "core/plan/step_time_plan.h"
#include "harness/emulated_scenario.h"
#include "harness/run_timeline.h"
#include "harness/scenario.h"

namespace engram {
namespace {

const std::string kFile = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/slow_nvlink_step_time.yaml";

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

// The core step model of `rank` at `tokens` (a step of one replica: the DP
// slot is its own tokens), its links `link_factor` times slower: what
// `plan` computes, called here directly.
double model_us(const PlanResult& plan, int rank, int tokens, double link_factor) {
  const RankPlan& rp = plan.ranks[static_cast<size_t>(rank)];
  StepCostInput in = step_input_of(plan, rp, tokens);
  in.tokens_slot = std::max(1, tokens);
  in.slow_link_factor = link_factor;
  return placement_ops(rp.placement).step_time(in, step_constants_for(step_gpu_model(plan.deployment))).exposed_us;
}

// Each rank's steps, in order: every batch, every table of the lookup model.
std::vector<double> expected_steps(const PlanResult& plan, const harness::Scenario& s, int rank, double link_factor) {
  const size_t tables = model_preset(s.lookup.model).value().tables.size();
  std::vector<double> out;
  for (const harness::ScenarioBatch& b : s.lookup.batches)
    for (size_t t = 0; t < tables; ++t) out.push_back(model_us(plan, rank, b.tokens_by_replica[0], link_factor));
  return out;
}

double lower_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

class SlowNvlink : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = harness::load_scenario_file(kFile);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    scenario = s.value();
    outcome = harness::run_scenario(scenario, std::nullopt, &run);
    ASSERT_TRUE(run.plan.is_ok()) << run.plan.status().to_string();
  }
  harness::Scenario scenario;
  harness::EmulatedOutcome run;
  harness::ScenarioOutcome outcome;
};

TEST_F(SlowNvlink, TheSlowRanksStepsTakeTheModelsTimeWithItsNvlinkSlower) {
  EXPECT_TRUE(outcome.passed) << joined(outcome.failures);
  const PlanResult& plan = run.plan.value();
  ASSERT_EQ(plan.ranks.size(), 4u);
  ASSERT_EQ(run.world.step_times.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(plan.ranks[static_cast<size_t>(r)].placement, Placement::kDevicePeer);
    // The same function, the same inputs: the same doubles.
    const std::vector<double> want = expected_steps(plan, scenario, r, r == 2 ? 2.0 : 1.0);
    EXPECT_EQ(run.world.step_times[static_cast<size_t>(r)].step_us, want);
    // Peer reads wait on no one.
    for (sim::SimTimeUs w : run.world.step_times[static_cast<size_t>(r)].waited_us) EXPECT_EQ(w, 0u);
    // The clock moved by the steps' time, rounded once over their sum.
    double sum = 0;
    for (double us : want) sum += us;
    EXPECT_NEAR(static_cast<double>(run.world.step_times[static_cast<size_t>(r)].advanced_us), sum, 0.5);
  }
  // The report: rank 2 above the others by the model's amount.
  ASSERT_EQ(outcome.step_times.size(), 4u);
  const double slow_max = model_us(plan, 2, 64, 2.0), normal_max = model_us(plan, 0, 64, 1.0);
  EXPECT_GT(slow_max, normal_max);
  for (int r : {0, 1, 3}) {
    EXPECT_DOUBLE_EQ(outcome.step_times[2].max_us - outcome.step_times[static_cast<size_t>(r)].max_us,
                     slow_max - normal_max);
    EXPECT_DOUBLE_EQ(outcome.step_times[static_cast<size_t>(r)].p50_us,
                     lower_median(expected_steps(plan, scenario, r, 1.0)));
  }
  EXPECT_DOUBLE_EQ(outcome.step_times[2].p50_us, lower_median(expected_steps(plan, scenario, 2, 2.0)));
  EXPECT_EQ(outcome.step_times[2].steps, expected_steps(plan, scenario, 2, 2.0).size());
}

TEST_F(SlowNvlink, StepTimeUsMaxPassesAboveTheModelsTimeAndFailsBelowItNamingRankAndTimes) {
  const PlanResult& plan = run.plan.value();
  const double slow_max = model_us(plan, 2, 64, 2.0), normal_max = model_us(plan, 0, 64, 1.0);
  harness::Scenario s = scenario;
  // Every rank under one bound just above the slow rank's slowest step.
  s.expect.step_time_us_max = {{0, -1, std::nullopt, slow_max + 0.01}};
  harness::ScenarioOutcome o = harness::run_scenario(s);
  EXPECT_TRUE(o.passed) << joined(o.failures);

  // Just below it: rank 2 alone fails, named with its time and the others'.
  s.expect.step_time_us_max = {{0, -1, std::nullopt, slow_max - 0.01}};
  o = harness::run_scenario(s);
  ASSERT_FALSE(o.passed);
  ASSERT_EQ(o.failures.size(), 1u) << joined(o.failures);
  const std::string& f = o.failures[0];
  EXPECT_NE(f.find(fmt::format("rank 2's slowest lookup step takes {:.3f} us", slow_max)), std::string::npos) << f;
  EXPECT_NE(f.find(fmt::format("above the {} us expected", slow_max - 0.01)), std::string::npos) << f;
  EXPECT_NE(f.find(fmt::format("ranks 0-1, 3 within it (at most {:.3f} us)", normal_max)), std::string::npos) << f;

  // The p50 form, per rank range: rank 2's median over its bound.
  const double slow_p50 = lower_median(expected_steps(plan, scenario, 2, 2.0));
  s.expect.step_time_us_max = {{2, 2, slow_p50 - 0.01, std::nullopt}, {0, 1, slow_p50 - 0.01, std::nullopt}};
  o = harness::run_scenario(s);
  ASSERT_FALSE(o.passed);
  ASSERT_EQ(o.failures.size(), 1u) << joined(o.failures);
  EXPECT_NE(o.failures[0].find(fmt::format("rank 2's p50 lookup step takes {:.3f} us", slow_p50)), std::string::npos)
      << o.failures[0];

  // Without the slow fault every rank keeps within the bound rank 2 broke.
  s.planned_faults.clear();
  s.expect.faults_fired.clear();
  s.expect.step_time_us_max = {{0, -1, std::nullopt, normal_max + 0.01}};
  o = harness::run_scenario(s);
  EXPECT_TRUE(o.passed) << joined(o.failures);
}

TEST_F(SlowNvlink, TheSameSeedGivesTheSameTimesAndTheTimelineCarriesThem) {
  harness::EmulatedOutcome again;
  const harness::ScenarioOutcome o = harness::run_scenario(scenario, std::nullopt, &again);
  EXPECT_EQ(o.trace_hash, outcome.trace_hash);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(again.world.step_times[r].step_us, run.world.step_times[r].step_us);
    EXPECT_EQ(again.world.step_times[r].waited_us, run.world.step_times[r].waited_us);
  }
  // Another seed interleaves the ranks otherwise; the model's times stay.
  const harness::ScenarioOutcome other = harness::run_scenario(scenario, 50);
  EXPECT_TRUE(other.passed) << joined(other.failures);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(other.step_times[r].p50_us, outcome.step_times[r].p50_us);
    EXPECT_EQ(other.step_times[r].max_us, outcome.step_times[r].max_us);
  }

  // Each lookup step is a slice of its rank's lane with the model's time,
  // as long on the clock as the rank's share of it.
  const harness::RunTimeline timeline = harness::build_run_timeline(run, "slow nvlink");
  std::vector<double> drawn;
  sim::SimTimeUs on_clock = 0;
  for (const harness::TimelineSlice& slice : timeline.lanes[2].slices)
    if (slice.name == "lookup") {
      ASSERT_TRUE(slice.model_us.has_value());
      drawn.push_back(*slice.model_us);
      on_clock += slice.end_us - slice.begin_us;
      EXPECT_EQ(slice.waited_us, 0u);
    }
  EXPECT_EQ(drawn, run.world.step_times[2].step_us);
  EXPECT_EQ(on_clock, run.world.step_times[2].advanced_us);
  EXPECT_NE(harness::trace_event_json(timeline).find("\"model_us\""), std::string::npos);
}

// A collective placement: the straggler's peers wait for it in the step's
// collectives, and the report says so as their waiting time.
TEST(ScenarioStepTime, AStragglersCollectivePeersWaitTheDifference) {
  auto s = harness::parse_scenario_text(R"(hosts:
  - {name: h200-0, gpus: 2, gpu_model: H200}
layout: {tp: 2, dp: 1}
seed: 3
faults: {planned: [{site: slow, rank: 1, link_factor: 3}]}
lookup: {model: tiny, batches: [{tokens: [8]}, {tokens: [64]}]}
expect: {placement: device_collective, lookup_equal: true}
)",
                                        "straggler.yaml");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  harness::EmulatedOutcome run;
  const harness::ScenarioOutcome o = harness::run_scenario(s.value(), std::nullopt, &run);
  ASSERT_TRUE(o.passed) << joined(o.failures);
  ASSERT_EQ(run.world.step_times.size(), 2u);
  const sim::RankStepTimes& fast = run.world.step_times[0];
  const sim::RankStepTimes& slow = run.world.step_times[1];
  ASSERT_EQ(fast.step_us.size(), slow.step_us.size());
  ASSERT_FALSE(fast.step_us.empty());
  for (size_t i = 0; i < fast.step_us.size(); ++i) EXPECT_GT(slow.step_us[i], fast.step_us[i]) << i;
  // Each step ends together (its collectives end with the slowest): the
  // fast rank waits out the difference, the slow one waits on no one.
  sim::SimTimeUs fast_waited = 0;
  for (sim::SimTimeUs w : fast.waited_us) fast_waited += w;
  for (sim::SimTimeUs w : slow.waited_us) EXPECT_EQ(w, 0u);
  EXPECT_GT(fast_waited, 0u);
  EXPECT_EQ(fast_waited, slow.advanced_us - fast.advanced_us);
  EXPECT_EQ(o.step_times[0].waited_total_us, fast_waited);
}

}  // namespace
}  // namespace engram
