// A command whose stdout cannot be written (a full disk: /dev/full; a
// closed stdout) says so on stderr and exits non-zero, for every command
// that prints a document or a table.
#include <gtest/gtest.h>
#include <string>

#include "tests/engramlab_command.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

testing::CommandOutput run_with_stdout(const std::string& args, const std::string& stdout_to) {
  return testing::run_engramlab(args, "", stdout_to);
}

const std::string kPlan = "plan --cpu-offload --tp 1 --dp 4 --gpu-model GB200 --gpus-per-host 4 --shm-size 190GiB";

TEST(StdoutFailure, EveryCommandReportsAStdoutItCannotWrite) {
  const std::string scenario = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/dp1_resolves_disabled.yaml";
  // Each of these exits 0 when its stdout can be written.
  for (const std::string& args : {kPlan + " --json", kPlan,
                                 "scenario run --json " + scenario, std::string("fuzz --seeds 1 --seed 1 --json"),
                                 std::string("shm list --json --dir /dev/shm"), std::string("doctor --json"), std::string("doctor"),
                                 std::string("plan --no-such-flag --json")}) {
    for (const std::string to : {">/dev/full", ">&-"}) {
      SCOPED_TRACE(args + " " + to);
      const auto out = run_with_stdout(args, to);
      EXPECT_NE(out.exit_code, 0) << out.text;
      EXPECT_NE(out.text.find(golden_message("output.stdout_failed")), std::string::npos) << out.text;
    }
  }
}

TEST(StdoutFailure, AWritableStdoutIsNotReported) {
  const auto out = run_with_stdout(kPlan + " --json", ">/dev/null");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.text.find(golden_message("output.stdout_failed")), std::string::npos) << out.text;
}

}  // namespace
}  // namespace engram
