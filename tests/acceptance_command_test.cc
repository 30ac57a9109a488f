// `engramlab acceptance` as an operator starts it: under `engramlab launch`.
// Bad flags exit 2 naming the flag before anything is built; without a
// launcher it exits 2 naming the launchers; a rank without a GPU fails its
// start with exit 1 naming the missing GPU (on a GPU machine it runs the
// check instead: tests/gpu and tools/gpu_acceptance.sh cover that side).
#include <gtest/gtest.h>

#include <string>

#include "tests/engramlab_command.h"

namespace engram {
namespace {

using Output = testing::CommandOutput;

Output run(const std::string& args) { return testing::run_engramlab_without_gpu(args); }

std::string under_launch(const std::string& acceptance_args) {
  return testing::launch_one_rank("acceptance --table-model tiny " + acceptance_args);
}

TEST(AcceptanceCommand, BadFlagsExit2NamingTheFlagValueAndFix) {
  struct Case {
    const char* args;
    const char* message;
  } cases[] = {
      {"--tokens 0", "--tokens: '0' is not a whole number in [1, 1048576]; write e.g. --tokens 1"},
      {"--tokens 1,,8", "--tokens: '' is not a whole number"},
      {"--replays -1", "--replays: '-1' is not a whole number in [1, 100000]"},
      {"--tp 3", "--tp: '3' is not a whole number in [0, 1]"},
      {"--dp-shared-memory maybe", "--dp-shared-memory: 'maybe' is not true or false"},
      {"--shard-group rack", "--shard-group: 'rack' is not a shard group; write world, nvlink_domain, host, replica or engram_dp"},
      {"--ranks-per-gpu 0", "--ranks-per-gpu: '0' is not a whole number in [1, 8]"},
      {"--ranks-per-gpu 9", "--ranks-per-gpu: '9' is not a whole number in [1, 8]"},
  };
  for (const Case& c : cases) {
    const Output out = run(under_launch(c.args));
    EXPECT_EQ(out.exit_code, 2) << c.args << "\n" << out.text;
    EXPECT_NE(out.text.find(c.message), std::string::npos) << c.args << "\n" << out.text;
  }
}

TEST(AcceptanceCommand, WithoutALauncherItSaysWhichOnesToUse) {
  const Output out = run("acceptance --table-model tiny");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("engramlab launch -n 2 -- engramlab acceptance"), std::string::npos) << out.text;
}

TEST(AcceptanceCommand, ARankWithoutAGpuFailsNamingIt) {
  const Output out = run(under_launch("--tokens 1,8"));
  EXPECT_EQ(out.exit_code, 1) << out.text;
  EXPECT_NE(out.text.find("looks up on this rank's GPU, but the rank has none"), std::string::npos) << out.text;
  EXPECT_EQ(out.text.find("PASS"), std::string::npos) << out.text;
}

}  // namespace
}  // namespace engram
