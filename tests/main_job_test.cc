// The main job, tools/run.sh, given the built command (--engramlab, so the
// test does not build another): what each engine builds for the embedded
// DEP8 deployment and its run on the emulator under each engine, in under a
// screen, exit 0; the same for a pasted vLLM command line, its temporary
// deployment file removed after; bad arguments exit 2 saying what to give.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "engramlab_command.h"

namespace engram::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kSource = ENGRAM_SOURCE_DIR;

// `bash tools/run.sh --engramlab BUILT ARGS` from the source tree, stderr
// folded in.
CommandOutput main_job(const std::string& args) {
  return run_engramlab(args, "cd " + kSource + " && TMPDIR=" + ::testing::TempDir() + " bash tools/run.sh --engramlab");
}

size_t lines_of(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

std::vector<std::string> command_line_files() {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(::testing::TempDir()))
    if (entry.path().filename().string().rfind("engramlab-from-command-line.", 0) == 0) found.push_back(entry.path());
  return found;
}

TEST(MainJob, TheEmbeddedDeploymentIsPlannedAndRunUnderEveryEngineInAScreen) {
  const CommandOutput out = main_job("");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_THAT(out.text, HasSubstr("== what each engine builds for scenarios/deployments/dep8_gb300_two_nodes.yaml"));
  EXPECT_THAT(out.text, HasSubstr("engine               | engramlab "));
  EXPECT_THAT(out.text, HasSubstr("defaults used (not written by you):"));
  EXPECT_THAT(out.text, HasSubstr("== scenarios/deployments/dep8_gb300_two_nodes.yaml on the emulator under each "
                                  "engine's plan, 16 seeds each"));
  EXPECT_THAT(out.text, HasSubstr("\nengramlab   host_shared; 16 seeds: "));
  EXPECT_THAT(out.text, HasSubstr("\nsglang      sglang_private with host_layout: per_rank"));
  EXPECT_THAT(out.text, HasSubstr("under each of 3 engines: 0 broke a rule"));
  // A screen: the answer, not a manual.
  EXPECT_LE(lines_of(out.text), 50u) << out.text;
  EXPECT_THAT(out.text, Not(HasSubstr("run.sh: building")));  // the given binary: nothing built
}

TEST(MainJob, APastedCommandLineRunsAsItsDeploymentAndLeavesNoFile) {
  const CommandOutput out = main_job(
      "--from \"vllm serve deepseek-ai/DeepSeek-V4.1-Flash -tp 1 -dp 8 --data-parallel-size-local 4\" --gpu-model GB300");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_THAT(out.text, HasSubstr("-dp 8 with --data-parallel-size-local 4: 2 nodes of 4 GPUs"));
  EXPECT_THAT(out.text, HasSubstr("== the command line's deployment on the emulator under each engine's plan"));
  // --gpu-model GB300 reached plan (the word after a plan flag is its value, not a file).
  EXPECT_THAT(out.text, HasSubstr("2 hosts of GB300"));
  EXPECT_THAT(out.text, HasSubstr("\nvllm        host_head_sharded; 16 seeds: "));
  EXPECT_LE(lines_of(out.text), 50u) << out.text;
  EXPECT_TRUE(command_line_files().empty()) << "the command line's deployment file stayed";
}

TEST(MainJob, BadArgumentsExitTwoSayingWhatToGive) {
  const CommandOutput missing = main_job("no_such_cluster.yaml");
  EXPECT_EQ(missing.exit_code, 2) << missing.text;
  EXPECT_THAT(missing.text, HasSubstr("'no_such_cluster.yaml' is not a file; give a deployment file (YAML), --from"));
  const CommandOutput both = main_job("scenarios/deployments/dep8_gb300_two_nodes.yaml --from \"vllm serve x\"");
  EXPECT_EQ(both.exit_code, 2) << both.text;
  EXPECT_THAT(both.text, HasSubstr("give a deployment file or --from \"COMMAND LINE\", not both"));
  const CommandOutput no_binary =
      run_engramlab("", "cd " + kSource + " && bash tools/run.sh --engramlab /nonexistent/engramlab --seeds");
  EXPECT_EQ(no_binary.exit_code, 2) << no_binary.text;
  EXPECT_THAT(no_binary.text, HasSubstr("--engramlab needs an engramlab binary"));
}

}  // namespace
}  // namespace engram::testing
