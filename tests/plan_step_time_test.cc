// `engramlab plan`'s step times (issue 49): the table and JSON, the
// calibration it names, --calibration's fit and check, bad calibration
// files (exit 2 naming file, line and field), and --sweep with its SVG,
// rendered by a real renderer (rsvg-convert, tools/setup.sh installs it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <regex>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/engramlab_command.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::run_engramlab;

const std::string kDocs = std::string(ENGRAM_SOURCE_DIR) + "/docs/";

// A calibration file in the test's temp dir, removed when it goes.
struct TempFile {
  explicit TempFile(const std::string& text)
      : path(::testing::TempDir() + "plan_step_time_test." + std::to_string(getpid()) + ".csv") {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  std::string path;
};

TEST(PlanStepTime, PrintsEachPlacementsStepAtEveryTokenCountWithItsCalibration) {
  const auto r = run_engramlab("plan --tp 1 --dp 2 --peer-shards --tokens 1,64,1024,8192");
  EXPECT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr("step time (one lookup of one layer per rank"),
                            HasSubstr("calibration: built-in: fitted on docs/calibration_1xh200.csv"),
                            HasSubstr("device_peer (ranks 0-1; group of 2 over NVLink"), HasSubstr("exposed us")));
}

TEST(PlanStepTime, JsonHasASizeEachAndTheTerms) {
  const auto r = run_engramlab("plan --tp 1 --dp 2 --peer-shards --tokens 1,8192 --json");
  ASSERT_EQ(r.exit_code, 0) << r.text;
  const size_t start = r.text.find('{');  // stderr's notes, if any, come first
  ASSERT_NE(start, std::string::npos) << r.text;
  const auto j = nlohmann::json::parse(r.text.substr(start));
  const auto& steps = j["step_time"]["placements"][0]["steps"];
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_GT(steps[1]["step_time_us_p50"].get<double>(), steps[0]["step_time_us_p50"].get<double>());
  EXPECT_FALSE(steps[1]["terms"].empty());
  EXPECT_TRUE(j["calibration_fit"].is_null());
}

TEST(PlanStepTime, CalibrationFitsAndSaysSo) {
  const auto r = run_engramlab("plan --tp 1 --dp 2 --peer-shards --calibration " + kDocs + "calibration_1xh200.csv");
  EXPECT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr("fit error per series and size"), HasSubstr("rms log error"),
                            HasSubstr("calibration: fitted on " + kDocs + "calibration_1xh200.csv")));
}

// The shipped model against its own fit set: the first anchors' collective
// at one token (an older, slower collective) is outside 1.25x, and the check
// says which line.
TEST(PlanStepTime, CalibrationCheckNamesThePointsOutsideTheirBound) {
  const auto r = run_engramlab("plan --calibration-check --calibration " + kDocs + "calibration_1xh200.csv");
  EXPECT_EQ(r.exit_code, 1) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr("calibration check"), HasSubstr("OUTSIDE"), HasSubstr("points outside")));
}

TEST(PlanStepTime, BadCalibrationFilesExitTwoNamingFileLineAndField) {
  const std::string header = "series,tokens_per_rank,latency_us_p50,gpu_model,ranks,group_size,table_bytes,heads\n";
  const TempFile b200(header + "device_peer,1,3.5,B200,1,1,1000000,24\ndevice_peer,8192,60,B200,1,1,1000000,24\n");
  auto r = run_engramlab("plan --calibration " + b200.path);
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, HasSubstr(b200.path + ":2: field gpu_model: the file calibrates B200"));
  const TempFile negative(header + "device_peer,1,3.5,H200,1,1,1000000,24\ndevice_peer,8192,-1,H200,1,1,1000000,24\n");
  r = run_engramlab("plan --calibration " + negative.path);
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, HasSubstr(negative.path + ":3: field latency_us_p50: -1 is negative"));
  const TempFile sizes(header + "device_peer,1,3.5,H200,1,1,1000000,24\n");
  r = run_engramlab("plan --calibration " + sizes.path);
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, HasSubstr(sizes.path + ":2: field tokens_per_rank"));
}

TEST(PlanStepTime, CompareEnginesAddsTheStepTimeRow) {
  const auto r = run_engramlab("plan --tp 2 --dp 2 --cpu-offload --compare-engines");
  EXPECT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(r.text, HasSubstr("step time p50"));
}

TEST(PlanStepTime, SweepPlansEveryCombinationAndMarksTheEnginesChoice) {
  const auto r = run_engramlab(
      "plan --hosts 1 --gpus-per-host 8 --shm-size 1TiB --sweep tp=1,2 dp=1,4 tokens=1,1024 placement=all");
  EXPECT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr("planned 44 deployments"), HasSubstr("*device_collective"),
                            HasSubstr("refused"), HasSubstr("us@1024")));
  const auto bad = run_engramlab("plan --sweep tp=1,2 warp=9");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.text, HasSubstr("'warp' is not a sweep key"));
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The frontier SVG: a point per planned row (its hover title), the refused
// ones counted, and a real renderer draws it into a PNG.
TEST(PlanStepTime, SweepSvgHasAPointPerPlannedRowAndRendersInARealRenderer) {
  const std::string base = ::testing::TempDir() + "plan_sweep_svg." + std::to_string(getpid());
  const std::string svg = base + ".svg", png = base + ".png";
  const auto r = run_engramlab("plan --hosts 1 --gpus-per-host 8 --shm-size 1TiB --sweep tp=1,2 dp=1,4 tokens=64 "
                               "placement=all --sweep-svg " + svg);
  ASSERT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(r.text, HasSubstr("plot: " + svg));
  const std::string doc = read_all(svg);
  std::smatch counts;
  ASSERT_TRUE(std::regex_search(doc, counts, std::regex(R"((\d+) planned, (\d+) refused)"))) << doc;
  const size_t planned = std::stoul(counts[1]), refused = std::stoul(counts[2]);
  EXPECT_EQ(planned + refused, 40u) << "tp 2 x dp 2 x 10 placements asked";
  EXPECT_GT(planned, 0u);
  EXPECT_GT(refused, 0u);
  EXPECT_EQ(count_of(doc, "<title>"), planned);
  EXPECT_THAT(doc, AllOf(HasSubstr("at 64 tokens a rank"), HasSubstr("engine's own choice"), HasSubstr("<polyline")));

  if (std::system("command -v rsvg-convert >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "rsvg-convert is not installed (apt-get install librsvg2-bin; tools/setup.sh installs it)";
  ASSERT_EQ(std::system(("rsvg-convert -o " + png + " " + svg).c_str()), 0) << "rsvg-convert refused " << svg;
  const std::string image = read_all(png);
  EXPECT_EQ(image.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(image.size(), 2000u);
  std::remove(svg.c_str());
  std::remove(png.c_str());
}

TEST(PlanStepTime, SweepSvgNeedsASweepAndAWritablePath) {
  const auto alone = run_engramlab("plan --sweep-svg x.svg");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_THAT(alone.text, HasSubstr("--sweep-svg 'x.svg' plots a sweep: give --sweep"));
  const auto into_dir = run_engramlab("plan --sweep tp=1,2 --sweep-svg " + ::testing::TempDir());
  EXPECT_EQ(into_dir.exit_code, 2) << into_dir.text;
  EXPECT_THAT(into_dir.text, HasSubstr("the sweep's SVG plot"));
}

}  // namespace
}  // namespace engram
