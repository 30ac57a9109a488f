// The scenario files as a set (enough of them, one name each, every fault
// site fired by one) and the runner's verdicts through the library. Each
// file itself runs once a build through the CLI: ctest's Scenario.* tests.
#include <gtest/gtest.h>

#include <set>

#include "core/base/rerun_command.h"
#include "harness/scenario.h"
#include "harness/emulated_scenario.h"
#include "sim/faults.h"
#include "tests/engramlab_rerun_suites.h"

namespace engram {
namespace {

const std::string kDir = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";
const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
// Reproduction lines name the built engramlab, not this test binary.
[[maybe_unused]] const bool kRerunLinesNameEngramlab = testing::rerun_lines_name_engramlab("ScenarioFiles");

// Each file runs once a build as its own ctest test, Scenario.<file name>
// (`engramlab scenario run <file>`, registered in tests/CMakeLists.txt),
// which fails where a fault site a file expects did not fire. So the files'
// expectations, read here, are what they fire: together, every site.
TEST(ScenarioFiles, EveryFaultSiteHasAScenarioAndEveryNameIsOne) {
  auto files = harness::scenario_files(kDir);
  ASSERT_TRUE(files.is_ok()) << files.status().to_string();
  EXPECT_GE(files->files.size(), 15u);
  EXPECT_TRUE(files->skipped.empty());
  std::set<std::string> sites_fired, names;
  for (const std::string& file : files->files) {
    SCOPED_TRACE(file);
    auto scenario = harness::load_scenario_file(file);
    ASSERT_TRUE(scenario.is_ok()) << scenario.status().to_string();
    EXPECT_TRUE(names.insert(scenario->name).second) << "two scenarios named " << scenario->name;
    for (const std::string& site : scenario->expect.faults_fired) sites_fired.insert(site);
  }
  for (const sim::FaultSiteInfo& site : sim::kFaultSites)
    EXPECT_TRUE(sites_fired.count(std::string(site.name))) << "no scenario fires " << site.name;
}

// The runner is not a rubber stamp: a scenario whose expectations are wrong fails, saying what differed.
TEST(ScenarioFiles, WrongExpectationsFailWithTheDifference) {
  auto scenario = harness::load_scenario_file(kDir + "/dep4_docker_default_shm.yaml");
  ASSERT_TRUE(scenario.is_ok()) << scenario.status().to_string();
  harness::Scenario s = scenario.value();
  s.expect.placements = {harness::ExpectedPlacement{0, -1, Placement::kHostShared}};
  s.expect.warnings = std::vector<std::string>{};
  s.expect.faults_fired = {"import"};
  s.expect.host_per_node = harness::ExpectedSize{"94.4GiB", 101'361'000'000, 50'000'000};
  harness::ScenarioOutcome out = harness::run_scenario(s, 77);
  ASSERT_FALSE(out.passed);
  std::string all;
  for (const auto& f : out.failures) all += f + "\n";
  EXPECT_NE(all.find("placement: expected host_shared for rank 0, got host_head_sharded"), std::string::npos) << all;
  EXPECT_NE(all.find("expected no warnings, got 1"), std::string::npos) << all;
  EXPECT_NE(all.find("fault site import never fired"), std::string::npos) << all;
  EXPECT_NE(all.find("host_per_node expected 94.4GiB"), std::string::npos) << all;
  EXPECT_EQ(out.reproduction, kEngramlab + " scenario run " + kDir + "/dep4_docker_default_shm.yaml --seed 77");

  // An error expected where the run succeeds, and a success expected where it fails.
  s = scenario.value();
  s.expect.error = harness::ExpectedError{ErrorCode::kUnavailable, {"x"}, 1, "import"};
  s.expect.lookup_equal = false;
  out = harness::run_scenario(s);
  ASSERT_FALSE(out.passed);
  EXPECT_NE(out.failures[0].find("expected a unavailable error, but every rank succeeded"), std::string::npos)
      << out.failures[0];
  auto failing = harness::load_scenario_file(kDir + "/fault_import.yaml");
  ASSERT_TRUE(failing.is_ok());
  s = failing.value();
  s.expect.error.reset();
  out = harness::run_scenario(s);
  ASSERT_FALSE(out.passed);
  EXPECT_NE(out.failures[0].find("expected success, got: permission_denied"), std::string::npos) << out.failures[0];
}

TEST(ScenarioFiles, SameSeedSameTraceOtherSeedOtherInterleaving) {
  auto scenario = harness::load_scenario_file(kDir + "/gb300_two_nodes_fabric.yaml");
  ASSERT_TRUE(scenario.is_ok());
  auto a = harness::run_scenario(scenario.value(), 5);
  auto b = harness::run_scenario(scenario.value(), 5);
  auto c = harness::run_scenario(scenario.value(), 6);
  EXPECT_TRUE(a.passed && b.passed && c.passed);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_NE(a.trace_hash, c.trace_hash);
}

// expect.handle_type per shard group: two hosts, one with IMEX (FABRIC) and
// one without (POSIX fd), each its own group under shard_group: host.
TEST(ScenarioFiles, HandleTypePerShardGroup) {
  const std::string base = R"(name: two_host_groups
hosts:
  - {name: imex, gpus: 4, gpu_model: GB300, nvlink_domain: nvl72-a, imex_channel: true, fabric_attribute: true}
  - {name: plain, gpus: 4, gpu_model: GB300}
layout: {tp: 4, dp: 2}
config: {peer_shards: true, shard_group: host}
seed: 7
lookup: {tokens: 8}
expect:
  placement: device_peer
  handle_type: )";
  auto run = [&](const std::string& handle_type) {
    auto s = harness::parse_scenario_text(base + handle_type + "\n", "groups.yaml");
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    harness::ScenarioOutcome out = s.is_ok() ? harness::run_scenario(s.value()) : harness::ScenarioOutcome{};
    std::string all;
    for (const auto& f : out.failures) all += f + "\n";
    return std::pair(out.passed, all);
  };
  auto [passed, failures] = run("[fabric, posix_fd]");
  EXPECT_TRUE(passed) << failures;

  std::tie(passed, failures) = run("[fabric, fabric]");
  EXPECT_FALSE(passed);
  EXPECT_NE(failures.find("shard group 1 (ranks 4-7): handle type: expected fabric, the runtime (rank 4) chose "
                          "posix_fd"),
            std::string::npos)
      << failures;
  EXPECT_EQ(failures.find("shard group 0"), std::string::npos) << failures;

  std::tie(passed, failures) = run("[fabric]");
  EXPECT_FALSE(passed);
  EXPECT_NE(failures.find("lists 1 handle types, one per shard group, but the job has 2"), std::string::npos)
      << failures;

  // The map form: only the groups named are checked.
  std::tie(passed, failures) = run("{1: posix_fd}");
  EXPECT_TRUE(passed) << failures;
  std::tie(passed, failures) = run("{0: posix_fd}");
  EXPECT_FALSE(passed);
  EXPECT_NE(failures.find("shard group 0 (ranks 0-3): handle type: expected posix_fd"), std::string::npos) << failures;
  std::tie(passed, failures) = run("{2: fabric}");
  EXPECT_NE(failures.find("names shard group 2, but the job has 2 shard groups"), std::string::npos) << failures;

  // `none` is a handle type too: these groups did share, so it fails naming
  // what they chose; an unknown name lists every name from the one table.
  std::tie(passed, failures) = run("{1: none}");
  EXPECT_FALSE(passed);
  EXPECT_NE(failures.find("shard group 1 (ranks 4-7): handle type: expected none, the runtime (rank 4) chose posix_fd"),
            std::string::npos)
      << failures;
  auto unknown = harness::parse_scenario_text(base + "posix\n", "groups.yaml");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("'posix' is not a handle type; write posix_fd, fabric or none"),
            std::string::npos)
      << unknown.status().to_string();

  // The scalar form over both groups: the disagreeing ranks named once, as a range.
  std::tie(passed, failures) = run("fabric");
  EXPECT_FALSE(passed);
  EXPECT_NE(failures.find("ranks disagree on the handle type: fabric vs posix_fd at ranks 4-7\n"), std::string::npos)
      << failures;
  EXPECT_EQ(failures.find("disagree"), failures.rfind("disagree")) << failures;

  EXPECT_FALSE(harness::parse_scenario_text(base + "[fabric, nvlink]\n", "groups.yaml").is_ok());
  EXPECT_FALSE(harness::parse_scenario_text(base + "[]\n", "groups.yaml").is_ok());
  EXPECT_FALSE(harness::parse_scenario_text(base + "{x: fabric}\n", "groups.yaml").is_ok());
}

}  // namespace
}  // namespace engram
