// `engramlab launch` relaying its ranks' output: a line without end is
// written on in bounded pieces, in bounded time; a launcher whose stdout
// closes (`launch ... | head -1`) stops relaying it and lets its ranks run
// to their end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/process_run.h"
#include "tests/temp_dir.h"
#include "tests/golden_messages.h"

namespace {

using ::engram::testing::golden_message;

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using engram::testing::run;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";

struct TempDir : engram::testing::TempDir {
  TempDir() : engram::testing::TempDir("/tmp/engramlab-relay") {}
};

std::string write_script(const std::string& dir, const std::string& body) {
  const std::string path = dir + "/rank.sh";
  std::ofstream(path) << "#!/bin/sh\n" << body;
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

TEST(LaunchRelay, ALineWithoutANewlineIsRelayedInBoundedPiecesAndTime) {
  TempDir dir;
  constexpr size_t kBytes = size_t{4} << 20;
  const std::string script =
      write_script(dir.path, "head -c " + std::to_string(kBytes) + " /dev/zero | tr '\\0' x\n");
  const auto r = run(kEngramlab + " launch -n 1 -- " + script + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_LT(r.took, 20s);
  size_t xs = 0, longest = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[rank 0] ", 0) != 0) continue;
    xs += line.size() - 9;
    longest = std::max(longest, line.size());
  }
  EXPECT_EQ(xs, kBytes) << "every byte arrives";
  EXPECT_LE(longest, (size_t{64} << 10) + 9 + 8192) << "the held line is bounded (64 KiB and one read)";
}

TEST(LaunchRelay, AClosedStdoutStopsTheRelayAndTheRanksFinish) {
  TempDir dir;
  const std::string script = write_script(
      dir.path, "echo first\nsleep 0.5\ni=0\nwhile [ $i -lt 3000 ]; do echo \"line $i\"; i=$((i+1)); done\n"
                "touch " + dir.path + "/done-$RANK\n");
  const auto r = run("bash -c '" + kEngramlab + " launch -n 2 --grace-ms 5000 -- " + script +
                     " | head -1; echo launch exit ${PIPESTATUS[0]}'");
  EXPECT_NE(r.output.find("launch exit 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(golden_message("output.stdout_failed")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no longer relaying the ranks' stdout"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir.path + "/done-0")) << r.output;
  EXPECT_TRUE(fs::exists(dir.path + "/done-1")) << r.output;
}

}  // namespace
