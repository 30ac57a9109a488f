// Pasted reproduction lines: each argument comes back from the shell as one
// word, the binary is this process's absolute path, files are absolute.
#include "core/base/shell_quote.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/base/rerun_command.h"

namespace engram {
namespace {

TEST(ShellQuote, PlainWordsStayAsTheyAre) {
  EXPECT_EQ(shell_quote("scenario"), "scenario");
  EXPECT_EQ(shell_quote("/opt/x/scenarios/dep4_shared.yaml"), "/opt/x/scenarios/dep4_shared.yaml");
  EXPECT_EQ(shell_quote("--seed=7,a:b@c%d+e"), "--seed=7,a:b@c%d+e");
}

TEST(ShellQuote, EverythingElseIsSingleQuoted) {
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("my scenarios/a b.yaml"), "'my scenarios/a b.yaml'");
  EXPECT_EQ(shell_quote("$HOME"), "'$HOME'");
  EXPECT_EQ(shell_quote("a;rm -rf x"), "'a;rm -rf x'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("*"), "'*'");
}

TEST(ShellQuote, TheShellGivesEachArgumentBackWordForWord) {
  const std::vector<std::string> args = {"printf", "%s\\n", "a b", "it's", "$x", "", "\"q\"", "back\\slash", "~"};
  const std::string line = shell_command(args);
  std::FILE* pipe = ::popen(("sh -c " + shell_quote(line)).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  ASSERT_EQ(::pclose(pipe), 0) << line;
  EXPECT_EQ(out, "a b\nit's\n$x\n\n\"q\"\nback\\slash\n~\n") << line;
}

TEST(RerunCommand, StartsWithTheBinaryAndQuotesEachArgument) {
  const std::string before = rerun_binary();
  EXPECT_TRUE(std::filesystem::path(before).is_absolute()) << before;  // /proc/self/exe: this test binary
  set_rerun_binary("/opt/my tools/engramlab");
  EXPECT_EQ(rerun_command({"scenario", "run", "/a b.yaml", "--seed", "3"}),
            "'/opt/my tools/engramlab' scenario run '/a b.yaml' --seed 3");
  set_rerun_binary(before);
  EXPECT_EQ(rerun_command({"fuzz"}), shell_quote(before) + " fuzz");
}

TEST(RerunCommand, ExistingFilesAreMadeAbsoluteOthersStay) {
  const std::filesystem::path here = std::filesystem::current_path();
  const std::string source = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/../scenarios/dep4_shared.yaml";
  EXPECT_EQ(absolute_file_path(source), std::string(ENGRAM_SOURCE_DIR) + "/scenarios/dep4_shared.yaml");
  std::filesystem::current_path(ENGRAM_SOURCE_DIR);
  EXPECT_EQ(absolute_file_path("scenarios/dep4_shared.yaml"), std::string(ENGRAM_SOURCE_DIR) + "/scenarios/dep4_shared.yaml");
  EXPECT_EQ(absolute_file_path("no-such-scenario.yaml"), "no-such-scenario.yaml");
  EXPECT_EQ(absolute_file_path(""), "");
  std::filesystem::current_path(here);
}

}  // namespace
}  // namespace engram
