// The built `engramlab` against hostile input: numbers out of range are
// refused alike by every command (exit 2, one wording); files that are not
// regular files are refused at once; sizes that would overflow the memory
// plan are refused, not printed wrapped; and raw bytes in a host name
// still give valid UTF-8 JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/text_excerpt.h"
#include "process_run.h"
#include "tests/temp_dir.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::run;

const std::string kBin = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";

bool valid_utf8(const std::string& text) {
  for (size_t at = 0; at < text.size();) {
    const size_t n = utf8_sequence_bytes(text, at);
    if (n == 0) return false;
    at += n;
  }
  return true;
}

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("/tmp/engramlab-hostile") {}
};

TEST(HostileInput, OutOfRangeNumbersAreRefusedAlikeByEveryCommand) {
  const std::string scenario = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/dep4_shared.yaml";
  struct Case {
    std::string args, flag;
  };
  for (const Case& c : {Case{"fuzz --seeds 1 --seed -1", "--seed: '-1'"},
                        Case{"fuzz --seeds -3", "--seeds: '-3'"},
                        Case{"fuzz --seeds 1 --seed 18446744073709551616", "--seed: '18446744073709551616'"},
                        Case{"launch --grace-ms -5 -n 1 -- true", "--grace-ms: '-5'"},
                        Case{"launch -n 0 -- true", "--nproc-per-node: '0'"},
                        Case{"launch -n 2 --master-port 99999999999 -- true", "--master-port: '99999999999'"},
                        Case{"plan --tp -1", "--tp: '-1'"},
                        Case{"plan --tokens-per-rank 2147483647", "--tokens-per-rank: '2147483647'"},
                        Case{"plan --hosts 99999999999", "--hosts: '99999999999'"}}) {
    const auto r = run(kBin + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_THAT(r.output, AllOf(HasSubstr(c.flag), HasSubstr("is not a whole number in ["))) << c.args;
  }
  // scenario run's --seed takes a list of seeds and ranges (1-5,9): its own
  // words, still naming the flag, the value and how to write one.
  const auto seeds = run(kBin + " scenario run --seed -5 " + scenario);
  EXPECT_EQ(seeds.exit_code, 2) << seeds.output;
  EXPECT_THAT(seeds.output, AllOf(HasSubstr("--seed -5: '-5' is not a seed or a range of seeds"),
                                  HasSubstr("write e.g. 7, 1-20 or 1,5,9-12")));
}

// Whatever a flag holds, the error shows an excerpt of it.
TEST(HostileInput, LongFlagValuesAreEchoedAsExcerpts) {
  const std::string huge(100000, '7');
  for (const std::string& args : {"plan --model " + huge, "plan --gpu-model " + huge + " --tp 1",
                                  "plan --gpu-memory " + huge, "plan --tp " + huge, "fuzz --seed " + huge,
                                  "shm list --job-id " + huge}) {
    const auto r = run(kBin + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args.substr(0, 40) << "\n" << r.output.substr(0, 300);
    EXPECT_LT(r.output.size(), 1024u) << args.substr(0, 40) << "\n" << r.output.substr(0, 300);
    EXPECT_THAT(r.output, HasSubstr("(100000 bytes)")) << args.substr(0, 40);
  }
}

TEST(HostileInput, MemoryPlanSizesThatWouldOverflowAreRefused) {
  const auto huge = run(kBin + " plan --tp 1 --dp 2 --gpu-memory 16000000TiB");
  EXPECT_EQ(huge.exit_code, 2) << huge.output;
  EXPECT_THAT(huge.output, AllOf(HasSubstr("--gpu-memory"), HasSubstr(golden_message("size.over_1_eib"))));
  EXPECT_THAT(huge.output, ::testing::Not(HasSubstr("-795869231")));
}

TEST(HostileInput, PlanRefusesFilesThatAreNotRegularAtOnce) {
  TempDir dir;
  const std::string fifo = dir.path + "/deploy.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& file : {fifo, std::string("/dev/zero")}) {
    const auto r = run(kBin + " plan --file " + file);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr(golden_message("file.not_regular")));
    EXPECT_LT(r.took, std::chrono::seconds(5)) << file;  // a FIFO without a writer would block forever
  }
}

TEST(HostileInput, RawBytesInAHostNameStillGiveUtf8Json) {
  TempDir dir;
  const std::string file = dir.path + "/deploy.yaml";
  {
    std::ofstream out(file, std::ios::binary);
    out << "hosts: [{name: \"node\xff\xfe\", gpus: 2}]\nlayout: {tp: 1, dp: 2}\nconfig: {shard_group: host}\n";
  }
  for (const std::string& extra : {std::string(""), std::string(" --tp 3")}) {  // a plan, and an error
    const auto r = run("(" + kBin + " plan --json --file " + file + extra + " 2>/dev/null)");  // stdout alone
    EXPECT_TRUE(valid_utf8(r.output)) << r.output;
    EXPECT_EQ(r.output.front(), '{') << r.output;
  }
}

TEST(HostileInput, ShmAndScenarioRefuseMissingPlaces) {
  const auto shm = run(kBin + " shm list --dir /nonexistent/engramlab-dir");
  EXPECT_EQ(shm.exit_code, 2) << shm.output;
  const auto scenario = run(kBin + " scenario run /nonexistent/engramlab-scenario.yaml");
  EXPECT_EQ(scenario.exit_code, 2) << scenario.output;
}

// A scenario directory holding a *.yaml symlink loop and a dangling link:
// both are skipped and named, the readable scenario runs, and --json still
// prints one JSON document with the skipped entries among its warnings.
TEST(HostileInput, ScenarioRunSkipsAndNamesYamlEntriesItCannotRead) {
  TempDir dir;
  std::filesystem::copy_file(std::string(ENGRAM_SOURCE_DIR) + "/scenarios/dp1_resolves_disabled.yaml",
                             dir.path + "/good.yaml");
  ASSERT_EQ(::symlink((dir.path + "/loop.yaml").c_str(), (dir.path + "/loop.yaml").c_str()), 0);
  ASSERT_EQ(::symlink("/nonexistent/engramlab-target.yaml", (dir.path + "/dangling.yaml").c_str()), 0);
  const auto text = run(kBin + " scenario run " + dir.path);
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr(dir.path + "/loop.yaml': Too many levels of symbolic links; skipped"));
  EXPECT_THAT(text.output, HasSubstr(dir.path + "/dangling.yaml': No such file or directory; skipped"));
  EXPECT_THAT(text.output, HasSubstr("1 of 1 scenarios passed"));

  const auto json = run("(" + kBin + " scenario run --json " + dir.path + " 2>/dev/null)");  // stdout alone
  EXPECT_EQ(json.exit_code, 0) << json.output;
  const auto doc = nlohmann::json::parse(json.output, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded()) << json.output;
  EXPECT_EQ(doc["passed"], 1) << json.output;
  ASSERT_EQ(doc["warnings"].size(), 2u) << json.output;
  EXPECT_THAT(doc["warnings"][0]["text"].get<std::string>(), HasSubstr("dangling.yaml"));
  EXPECT_THAT(doc["warnings"][1]["text"].get<std::string>(), HasSubstr("loop.yaml"));

  std::filesystem::remove(dir.path + "/good.yaml");
  const auto none = run("(" + kBin + " scenario run --json " + dir.path + " 2>/dev/null)");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  const auto error = nlohmann::json::parse(none.output, nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << none.output;
  EXPECT_THAT(error["error"]["message"].get<std::string>(), HasSubstr("loop.yaml"));
}

// Attributions: an empty --file is refused naming --file (not planned
// without a file), and a bad job id from the environment is named as
// ENGRAMLAB_JOB_ID, the place the user must fix, not --job-id.
TEST(HostileInput, EmptyFileAndBadEnvironmentJobIdAreNamedWhereTheyCameFrom) {
  const auto plan = run(kBin + " plan --file ''");
  EXPECT_EQ(plan.exit_code, 2) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("--file: '' is empty; give --file a value, or leave it out"));

  const auto launch = run("ENGRAMLAB_JOB_ID='bad id!' " + kBin + " launch -n 1 -- true");
  EXPECT_EQ(launch.exit_code, 2) << launch.output;
  EXPECT_THAT(launch.output, HasSubstr("ENGRAMLAB_JOB_ID 'bad id!'"));
  EXPECT_THAT(launch.output, ::testing::Not(HasSubstr("--job-id")));
  const auto flag = run(kBin + " launch -n 1 --job-id 'bad id!' -- true");
  EXPECT_EQ(flag.exit_code, 2) << flag.output;
  EXPECT_THAT(flag.output, HasSubstr("--job-id 'bad id!'"));
}

}  // namespace
}  // namespace engram
