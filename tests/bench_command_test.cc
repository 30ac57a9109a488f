// `engramlab bench` as an operator starts it: under `engramlab launch`. Bad
// flags exit 2 naming the flag, the value and the fix, before anything is
// built; without a launcher it exits 2 naming the launchers; a rank without
// a GPU exits 1 naming the missing GPU (on a GPU machine the bench runs
// instead: tools/gpu_bench.sh covers that side, tests/bench_rank_test.cc the
// rank body on the emulator).
#include <gtest/gtest.h>

#include <string>

#include "tests/engramlab_command.h"

namespace engram {
namespace {

using Output = testing::CommandOutput;

Output run(const std::string& args) { return testing::run_engramlab_without_gpu(args); }

std::string under_launch(const std::string& bench_args) {
  return testing::launch_one_rank("bench --table-model tiny --svg /dev/null " + bench_args);
}

TEST(BenchCommand, BadFlagsExit2NamingTheFlagValueAndFix) {
  struct Case {
    const char* args;
    const char* message;
  } cases[] = {
      {"--tokens 0", "--tokens: '0' is not a whole number in [1, 1048576]; write e.g. --tokens 1"},
      {"--tokens 1,,8", "--tokens: '' is not a whole number"},
      {"--replays 0", "--replays: '0' is not a whole number in [1, 1000000]"},
      {"--warmup -1", "--warmup: '-1' is not a whole number"},
      {"--reference-gib lots", "--reference-gib: 'lots' is not a whole number"},
      {"--id-draws 0", "--id-draws: '0' is not a whole number in [1, 1000000]"},
      {"--replays 4 --id-draws 5", "--id-draws 5 must be from 1 to --replays (4)"},
      {"--reference-order middle", "--reference-order: 'middle' is not an order; write first, last or both"},
      {"--placements device_peer,gpu_magic",
       "--placements: 'gpu_magic' is not a placement; write all, or some of device_collective, device_peer"},
      {"--tp 3", "--tp: '3' is not a whole number in [0, 1]"},
      {"--shard-group rack", "--shard-group: 'rack' is not a shard group; write world, nvlink_domain, host, replica or engram_dp"},
      {"--table 999", "--table: 999 is not a table of"},
  };
  for (const Case& c : cases) {
    const Output out = run(under_launch(c.args));
    EXPECT_EQ(out.exit_code, 2) << c.args << "\n" << out.text;
    EXPECT_NE(out.text.find(c.message), std::string::npos) << c.args << "\n" << out.text;
  }
}

TEST(BenchCommand, WithoutALauncherItSaysWhichOnesToUse) {
  const Output out = run("bench --table-model tiny");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("engramlab launch -n 2 -- engramlab bench"), std::string::npos) << out.text;
}

TEST(BenchCommand, ARankWithoutAGpuFailsNamingIt) {
  const Output out = run(under_launch("--tokens 1,8"));
  EXPECT_EQ(out.exit_code, 1) << out.text;
  EXPECT_NE(out.text.find("the bench looks up on this rank's GPU, but the rank has none"), std::string::npos)
      << out.text;
}

}  // namespace
}  // namespace engram
