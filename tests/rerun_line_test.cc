// An emulated run's "reproduce:" line inside a test reruns that test: the
// tests' main (tests/test_main.cc) names the running test, and a world with
// no reproduction of its own prints that line, not "<test binary> fuzz ...",
// which only engramlab takes. Its suite names no rerun binary (unlike
// sim_world_test's, whose lines name the built engramlab) until its last case.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/base/rerun_command.h"
#include "core/base/shell_quote.h"
#include "harness/request_schedule.h"
#include "sim/world.h"

namespace engram {
namespace {

using ::testing::HasSubstr;

std::string this_binary() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

sim::WorldSpec small_world() {
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("node-", 1, 2, "H200");
  spec.seed = 7;
  return spec;
}

// Runs a command, returning its exit status and output.
int run(const std::string& command, std::string& output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  return ::pclose(pipe);
}

TEST(RerunLine, TheRunningTestIsNamedAndItsLineRerunsIt) {
  const std::vector<std::string> words{this_binary(), "--gtest_filter=RerunLine.TheRunningTestIsNamedAndItsLineRerunsIt"};
  const std::string line = rerun_test_line();
  EXPECT_EQ(line, shell_command(words));
  // The line, run, runs this one test and it passes (the rerun stops here).
  if (std::getenv("ENGRAM_RERUN_LINE_CHILD") != nullptr) return;
  std::string output;
  const int status = run("ENGRAM_RERUN_LINE_CHILD=1 " + line, output);
  EXPECT_EQ(status, 0) << output;
  EXPECT_THAT(output, HasSubstr("[  PASSED  ] 1 test."));
  EXPECT_THAT(output, HasSubstr("RerunLine.TheRunningTestIsNamedAndItsLineRerunsIt"));
}

TEST(RerunLine, AWorldWithoutItsOwnLineRerunsTheTestNotFuzz) {
  const Result<sim::WorldSpec> spec = sim::complete_world_spec(small_world());
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->reproduction, rerun_test_line());
  EXPECT_THAT(spec->reproduction, HasSubstr("--gtest_filter=RerunLine.AWorldWithoutItsOwnLineRerunsTheTestNotFuzz"));
  EXPECT_THAT(spec->reproduction, ::testing::Not(HasSubstr("fuzz")));
  // A world's own line is kept.
  sim::WorldSpec own = small_world();
  own.reproduction = "engramlab scenario run x.yaml --seed 7";
  EXPECT_EQ(sim::complete_world_spec(own)->reproduction, own.reproduction);
}

TEST(RerunLine, AScheduleNamesItsSeedAndTheRunningTest) {
  EXPECT_EQ(harness::request_schedule_repro(12), "reproduce: ENGRAMLAB_SCHEDULE_SEED=12 " + rerun_test_line());
}

TEST(RerunLine, OutsideATestTheLinesAreEngramlabs) {
  const std::string line = rerun_test_line();
  set_rerun_test_line("");
  EXPECT_EQ(rerun_command_or_test({"fuzz", "--seed", "7", "--seeds", "1"}),
            shell_command(std::vector<std::string>{this_binary(), "fuzz", "--seed", "7", "--seeds", "1"}));
  EXPECT_EQ(harness::request_schedule_repro(3), "reproduce: ENGRAMLAB_SCHEDULE_SEED=3 build/tests/core_tests "
            "--gtest_filter=RequestSchedule.EveryCutHashesAsTheAcceptedSequenceWhole");
  set_rerun_test_line(line);
}

// Last: a binary that names its rerun binary (as sim_world_test names the
// built engramlab) keeps engramlab's line, test or not.
TEST(RerunLine, ANamedRerunBinaryKeepsTheFuzzLine) {
  set_rerun_binary("/opt/engramlab/bin/engramlab");
  const Result<sim::WorldSpec> spec = sim::complete_world_spec(small_world());
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->reproduction, "/opt/engramlab/bin/engramlab fuzz --seed 7 --seeds 1");
}

}  // namespace
}  // namespace engram
