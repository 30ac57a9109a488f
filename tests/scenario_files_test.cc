// Every scenario in scenarios/ passes on the emulator (through the library,
// not the binary), there are enough of them, and every fault site has a
// scenario that fires it.
#include <gtest/gtest.h>

#include <set>

#include "harness/scenario.h"
#include "harness/emulated_scenario.h"
#include "sim/faults.h"

namespace engram {
namespace {

const std::string kDir = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";

TEST(ScenarioFiles, EveryScenarioPasses) {
  auto files = scenario_files(kDir);
  ASSERT_TRUE(files.is_ok()) << files.status().to_string();
  EXPECT_GE(files->size(), 15u);
  std::set<std::string> sites_fired, names;
  for (const std::string& file : files.value()) {
    SCOPED_TRACE(file);
    auto scenario = load_scenario_file(file);
    ASSERT_TRUE(scenario.is_ok()) << scenario.status().to_string();
    EXPECT_TRUE(names.insert(scenario->name).second) << "two scenarios named " << scenario->name;
    sim::ScenarioOutcome out = sim::run_scenario(scenario.value());
    std::string why;
    for (const auto& f : out.failures) why += "\n  " + f;
    EXPECT_TRUE(out.passed) << scenario->name << ":" << why << "\n  reproduce: " << out.reproduction;
    for (const std::string& site : scenario->expect.faults_fired) sites_fired.insert(site);
  }
  for (const sim::FaultSiteInfo& site : sim::kFaultSites)
    EXPECT_TRUE(sites_fired.count(std::string(site.name))) << "no scenario fires " << site.name;
}

// The runner is not a rubber stamp: a scenario whose expectations are wrong fails, saying what differed.
TEST(ScenarioFiles, WrongExpectationsFailWithTheDifference) {
  auto scenario = load_scenario_file(kDir + "/dep4_docker_default_shm.yaml");
  ASSERT_TRUE(scenario.is_ok()) << scenario.status().to_string();
  Scenario s = scenario.value();
  s.expect.placements = {ExpectedPlacement{0, -1, Placement::kHostShared}};
  s.expect.warnings = std::vector<std::string>{};
  s.expect.faults_fired = {"import"};
  s.expect.host_per_node = ExpectedSize{"94.4GiB", 101'361'000'000, 50'000'000};
  sim::ScenarioOutcome out = sim::run_scenario(s, 77);
  ASSERT_FALSE(out.passed);
  std::string all;
  for (const auto& f : out.failures) all += f + "\n";
  EXPECT_NE(all.find("placement: expected host_shared for rank 0, got host_head_sharded"), std::string::npos) << all;
  EXPECT_NE(all.find("expected no warnings, got 1"), std::string::npos) << all;
  EXPECT_NE(all.find("fault site import never fired"), std::string::npos) << all;
  EXPECT_NE(all.find("host_per_node expected 94.4GiB"), std::string::npos) << all;
  EXPECT_EQ(out.reproduction, "engramlab scenario run " + kDir + "/dep4_docker_default_shm.yaml --seed 77");

  // An error expected where the run succeeds, and a success expected where it fails.
  s = scenario.value();
  s.expect.error = ExpectedError{ErrorCode::kUnavailable, {"x"}, 1, "import"};
  s.expect.lookup_equal = false;
  out = sim::run_scenario(s);
  ASSERT_FALSE(out.passed);
  EXPECT_NE(out.failures[0].find("expected a unavailable error, but every rank succeeded"), std::string::npos)
      << out.failures[0];
  auto failing = load_scenario_file(kDir + "/fault_import.yaml");
  ASSERT_TRUE(failing.is_ok());
  s = failing.value();
  s.expect.error.reset();
  out = sim::run_scenario(s);
  ASSERT_FALSE(out.passed);
  EXPECT_NE(out.failures[0].find("expected success, got: permission_denied"), std::string::npos) << out.failures[0];
}

TEST(ScenarioFiles, SameSeedSameTraceOtherSeedOtherInterleaving) {
  auto scenario = load_scenario_file(kDir + "/gb300_two_nodes_fabric.yaml");
  ASSERT_TRUE(scenario.is_ok());
  auto a = sim::run_scenario(scenario.value(), 5);
  auto b = sim::run_scenario(scenario.value(), 5);
  auto c = sim::run_scenario(scenario.value(), 6);
  EXPECT_TRUE(a.passed && b.passed && c.passed);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_NE(a.trace_hash, c.trace_hash);
}

}  // namespace
}  // namespace engram
