// `scenario run --timeline FILE.svg` as a reader sees it: a legend of only
// what happened, a time axis broken where the simulated clock jumps (a 30 s
// hang does not squash the rest into a line) and the errors as text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/engramlab_command.h"

namespace engram {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_engramlab;

std::string drawn(const std::string& scenario, const std::string& name) {
  const std::string svg = std::string(ENGRAM_BINARY_DIR) + "/tests/" + name;
  std::remove(svg.c_str());
  const auto out = run_engramlab("scenario run " + std::string(ENGRAM_SOURCE_DIR) + "/scenarios/" + scenario +
                                 " --timeline " + svg);
  EXPECT_EQ(out.exit_code, 0) << out.text;
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(svg.c_str());
  return text.str();
}

TEST(TimelineSvg, AHangIsABreakInTheAxisAndItsErrorsAreText) {
  const std::string svg = drawn("fault_hang.yaml", "timeline_svg_test_hang.svg");
  ASSERT_THAT(svg, HasSubstr("<svg"));
  // The legend names what happened, not every kind of step there is.
  EXPECT_THAT(svg, HasSubstr(">hung</text>"));
  EXPECT_THAT(svg, Not(HasSubstr(">import</text>")));
  EXPECT_THAT(svg, Not(HasSubstr(">shm_create</text>")));
  EXPECT_THAT(svg, HasSubstr(">fault fired</text>"));
  // A time axis from 0 s to the end, broken where the clock jumped 30 s.
  EXPECT_THAT(svg, HasSubstr(">0 s</text>"));
  EXPECT_THAT(svg, HasSubstr(">+30 s</text>"));
  // Errors visible as text, not only in hover titles.
  EXPECT_THAT(svg, HasSubstr(">errors</text>"));
  EXPECT_THAT(svg, HasSubstr("rank 2: deadline_exceeded"));
}

TEST(TimelineSvg, ARunWithoutFaultsHasNoFaultOrErrorInItsLegend) {
  const std::string svg = drawn("dep4_shared.yaml", "timeline_svg_test_ok.svg");
  ASSERT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, Not(HasSubstr(">fault fired</text>")));
  EXPECT_THAT(svg, Not(HasSubstr(">errors</text>")));
}

}  // namespace
}  // namespace engram
