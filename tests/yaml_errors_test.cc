// Every error of a YAML file in one run (issue 27): the deployment and the
// scenario readers collect each mistake with its line and column, unknown
// fields say which known one was meant, and `plan --file` and `scenario
// run` print them all at once.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <span>
#include <string>

#include "core/base/field_errors.h"
#include "core/deployment_file/deployment_yaml.h"
#include "harness/scenario.h"
#include "tests/engramlab_command.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Five different mistakes: a wrong type, an unknown GPU model, a misspelt
// nested field, a negative tp and an unknown top-level field.
constexpr const char* kFiveMistakes =
    "hosts:\n"
    "  - name: a\n"
    "    gpus: four\n"
    "    gpu_model: H2000\n"
    "    shm_sise: 1GiB\n"
    "layout:\n"
    "  tp: -2\n"
    "confg: {cpu_offload: true}\n";

const char* const kFiveErrors[] = {
    "d.yaml: line 3, column 11: hosts[0].gpus: 'four' is not a whole number in [1, 1024]",
    "d.yaml: line 4, column 16: hosts[0].gpu_model: unknown GPU model 'H2000'; did you mean 'H200'? known: H20, H100, H200",
    "d.yaml: line 5, column 5: hosts[0].shm_sise: unknown field 'shm_sise'; did you mean 'shm_size'? known fields here: "
    "name,",
    "d.yaml: line 7, column 7: layout.tp: '-2' is not a whole number in [1, 1048576]; write e.g. 1",
    "d.yaml: line 8, column 1: confg: unknown field 'confg'; did you mean 'config'? known fields here: model, hosts",
};

size_t lines_of(const std::string& text) { return std::count(text.begin(), text.end(), '\n') + 1; }

// Each expected line starts a line of `message`, in this order.
void expect_lines_in_order(const std::string& message, std::span<const char* const> lines) {
  size_t at = 0;
  for (const char* line : lines) {
    const size_t found = message.find(line, at);
    ASSERT_NE(found, std::string::npos) << "'" << line << "' missing (in order) in:\n" << message;
    EXPECT_TRUE(found == 0 || message[found - 1] == '\n') << line;
    at = found;
  }
}

TEST(YamlErrors, ADeploymentFileWithFiveMistakesReportsAllFive) {
  auto d = parse_deployment_text(kFiveMistakes, "d.yaml");
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
  const std::string& m = d.status().message();
  EXPECT_EQ(lines_of(m), 5u) << m;
  expect_lines_in_order(m, kFiveErrors);
}

// The same mistakes, under a scenario's own: an unknown top-level field, a
// misspelt expect field, a bad fault site and a bad size.
TEST(YamlErrors, AScenarioFileWithItsOwnMistakesReportsThemWithTheDeployments) {
  const std::string text = std::string(kFiveMistakes) +
                           "sed: 3\n"
                           "faults: {planned: [{site: imprt, rank: 0}]}\n"
                           "expect:\n"
                           "  placment: host_shared\n"
                           "  memory: {hbm_per_gpu: lots}\n";
  auto s = harness::parse_scenario_text(text, "d.yaml");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  const std::string& m = s.status().message();
  EXPECT_EQ(lines_of(m), 9u) << m;
  const char* const scenario_errors[] = {
      kFiveErrors[0], kFiveErrors[1], kFiveErrors[2], kFiveErrors[3],
      // The scenario's list of top-level fields, not the deployment's.
      "d.yaml: line 8, column 1: confg: unknown field 'confg'; did you mean 'config'? known fields here: name, "
      "description, seed",
      "d.yaml: line 9, column 1: sed: unknown field 'sed'; did you mean 'seed'?",
      "d.yaml: line 10, column 27: faults.planned[0].site: 'imprt' is not a fault site",
      "d.yaml: line 12, column 3: expect.placment: unknown field 'placment'; did you mean 'placement'?",
      "d.yaml: line 13, column 25: expect.memory.hbm_per_gpu: 'lots' is not a size",
  };
  expect_lines_in_order(m, scenario_errors);
}

// Checks across sections wait for the fields: a dp that did not read is
// not compared with a batch's replica count.
TEST(YamlErrors, CrossSectionChecksRunOnlyOnFieldsThatRead) {
  auto s = harness::parse_scenario_text(
      "hosts: [{name: a, gpus: 2}]\nlayout: {tp: 1, dp: two}\nlookup: {run: true, batches: [{tokens: [1, 1]}]}\n"
      "expect: {lookup_equal: true}\n",
      "s.yaml");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(lines_of(s.status().message()), 1u) << s.status().message();
  EXPECT_THAT(s.status().message(), HasSubstr("layout.dp: 'two'"));
  auto fixed = harness::parse_scenario_text(
      "hosts: [{name: a, gpus: 2}]\nlayout: {tp: 1, dp: 2}\nlookup: {run: true, batches: [{tokens: [1]}]}\n"
      "faults: {planned: [{site: import, rank: 7}]}\nexpect: {lookup_equal: true}\n",
      "s.yaml");
  ASSERT_FALSE(fixed.is_ok());
  EXPECT_THAT(fixed.status().message(),
              AllOf(HasSubstr("lookup.batches[0].tokens: 1 entries for 2 DP replicas"),
                    HasSubstr("\ns.yaml: line 4, column 41: faults.planned[0].rank: rank 7 is outside the world")));
}

TEST(YamlErrors, EveryUnknownKeyOfOneMapIsReported) {
  auto d = parse_deployment_text("hosts: [{name: a, gpus: 1}]\nlayout: {tpp: 1, dpp: 2, ep: 1}\n", "d.yaml");
  ASSERT_FALSE(d.is_ok());
  EXPECT_THAT(d.status().message(),
              AllOf(HasSubstr("line 2, column 10: layout.tpp: unknown field 'tpp'; did you mean 'tp'?"),
                    HasSubstr("\nd.yaml: line 2, column 18: layout.dpp: unknown field 'dpp'; did you mean 'dp'?")));
}

TEST(YamlErrors, AGpuFileIsLeftToThePlan) {
  auto d = parse_deployment_text("hosts: [{name: a, gpus: 1, gpu_model: gpus/my-gpu.yaml}]\n", "d.yaml");
  EXPECT_TRUE(d.is_ok()) << d.status().message();
}

TEST(FieldErrors, ListsEachErrorOnceInTheOrderOfTheFileAndCountsTheRest) {
  FieldErrors e;
  EXPECT_TRUE(e.add(Status::ok()));
  EXPECT_TRUE(e.status().is_ok());
  EXPECT_FALSE(e.add(invalid_argument("f: line 9, column 2: b: bad")));
  // One error keeps its own code.
  EXPECT_FALSE(e.add(invalid_argument("f: line 10, column 1: c: bad")));
  EXPECT_FALSE(e.add(invalid_argument("f: line 2, column 7: a: bad\nf: line 2, column 3: a0: bad")));
  EXPECT_FALSE(e.add(invalid_argument("f: line 9, column 2: b: bad")));  // the same again
  EXPECT_FALSE(e.add(invalid_argument("f: too large")));
  int value = 3;
  EXPECT_TRUE(e.set(value, Result<int>(4)));
  EXPECT_EQ(value, 4);
  EXPECT_FALSE(e.set(value, Result<int>(invalid_argument("f: line 1, column 1: v: bad"))));
  EXPECT_EQ(value, 4);
  EXPECT_EQ(e.count(), 6u);
  EXPECT_EQ(e.status().message(),
            "f: too large\nf: line 1, column 1: v: bad\nf: line 2, column 3: a0: bad\nf: line 2, column 7: a: bad\n"
            "f: line 9, column 2: b: bad\nf: line 10, column 1: c: bad");
  FieldErrors one;
  one.add(Status(ErrorCode::kNotFound, "f: gone"));
  EXPECT_EQ(one.status().code(), ErrorCode::kNotFound);
  FieldErrors many;
  for (int i = 1; i <= 30; ++i) many.add(invalid_argument(fmt::format("f: line {}, column 1: x{}: bad", i, i)));
  EXPECT_EQ(lines_of(many.status().message()), FieldErrors::kMaxListed + 1);
  EXPECT_THAT(many.status().message(), HasSubstr("\n... and 10 more errors; fix these and run again"));
}

// The commands print them all, exit 2.
TEST(YamlErrors, PlanAndScenarioRunPrintEveryErrorAtOnce) {
  const std::string dir = ::testing::TempDir() + "yaml_errors_test." + std::to_string(::getpid());
  const std::string deployment = dir + ".d.yaml", scenario = dir + ".s.yaml";
  std::ofstream(deployment) << kFiveMistakes;
  std::ofstream(scenario) << kFiveMistakes << "expect:\n  placment: host_shared\n";
  const auto plan = testing::run_engramlab("plan --file " + deployment);
  EXPECT_EQ(plan.exit_code, 2) << plan.text;
  const auto run = testing::run_engramlab("scenario run " + scenario);
  EXPECT_EQ(run.exit_code, 2) << run.text;
  std::remove(deployment.c_str());
  std::remove(scenario.c_str());
  for (const char* field : {"hosts[0].gpus", "hosts[0].gpu_model", "hosts[0].shm_sise", "layout.tp", "confg"}) {
    EXPECT_THAT(plan.text, HasSubstr(deployment + ": line")) << plan.text;
    EXPECT_THAT(plan.text, HasSubstr(std::string(field) + ": ")) << field;
    EXPECT_THAT(run.text, HasSubstr(std::string(field) + ": ")) << field;
  }
  EXPECT_THAT(run.text, HasSubstr("expect.placment: unknown field 'placment'; did you mean 'placement'?"));
}

}  // namespace
}  // namespace engram
