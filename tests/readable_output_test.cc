// Output people read (issue 48, items 6 and 7): tables aligned whatever
// their cells hold, delays in the unit the scenario files write, seeds
// written as lists and ranges, a Kubernetes size echoed in both units.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/base/fixes_once.h"
#include "core/base/seed_list.h"
#include "core/base/text_table.h"
#include "core/base/units.h"
#include "sim/faults.h"

namespace engram {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(TextTable, ColumnsAlignAndLongCellsWrapInsideTheirColumn) {
  const std::string text = format_text_table(
      {{"engine", "a", "bb"}, {"verdict", "fits", "cannot run: the tables take more than the host has"}}, 20);
  const std::vector<std::string> lines = lines_of(text);
  ASSERT_EQ(lines.size(), 4u) << text;  // the long verdict wraps onto three lines of its row
  // Every separator of a column at one position on every line.
  const size_t second = lines[0].find(" | ");
  for (const std::string& line : lines) EXPECT_EQ(line.find(" | "), second) << text;
  EXPECT_EQ(lines[1].find(" | ", second + 3), lines[0].find(" | ", second + 3)) << text;
  for (const std::string& line : lines) EXPECT_NE(line.back(), ' ') << "no trailing spaces";
  EXPECT_THAT(wrap_text("abcdefghij", 4), ElementsAre("abcd", "efgh", "ij"));
  EXPECT_THAT(wrap_text("", 4), ElementsAre(""));
}

TEST(FaultText, DelaysAreInTheUnitTheFileWrites) {
  sim::FaultPlan plan;
  plan.planned.push_back({sim::FaultSite::kSlow, 2, 1, "", 30'000'000});  // delay_ms: 30000
  EXPECT_THAT(plan.to_string(), HasSubstr("delay 30000 ms"));
  EXPECT_THAT(plan.to_string(), Not(HasSubstr("30000000")));
  plan.planned.front().delay_us = 1500;  // not whole ms: said in us
  EXPECT_THAT(plan.to_string(), HasSubstr("delay 1500 us"));
}

TEST(SeedList, RangesListsAndBounds) {
  EXPECT_THAT(parse_seed_list("7", "--seed").value(), ElementsAre(7u));
  EXPECT_THAT(parse_seed_list("1-3,9", "--seed").value(), ElementsAre(1u, 2u, 3u, 9u));
  EXPECT_THAT(parse_seed_list("18446744073709551615", "--seed").value(), ElementsAre(18446744073709551615u));
  auto backwards = parse_seed_list("5-2", "--seed");
  ASSERT_FALSE(backwards.is_ok());
  EXPECT_THAT(backwards.status().message(), HasSubstr("low to high (2-5)"));
  auto huge = parse_seed_list("0-2000000", "--seed");
  ASSERT_FALSE(huge.is_ok());
  EXPECT_THAT(huge.status().message(), HasSubstr("more than 10000 seeds"));
  auto past = parse_seed_list("18446744073709551616", "--seed");
  ASSERT_FALSE(past.is_ok());
  EXPECT_THAT(past.status().message(), HasSubstr("past the largest seed"));
  EXPECT_FALSE(parse_seed_list("2^64", "--seed").is_ok());
  EXPECT_FALSE(parse_seed_list("", "--seed").is_ok());
  EXPECT_FALSE(parse_seed_list("1,,2", "--seed").is_ok());
}

TEST(KubernetesUnits, ALetterAloneIsSaidInBothUnits) {
  const uint64_t bytes = parse_bytes("200G", "memory_limit", SizeUnits::kKubernetes).value();
  EXPECT_EQ(bytes, 200'000'000'000u);
  const auto reading = kubernetes_letter_reading("200G", bytes);
  ASSERT_TRUE(reading.has_value());
  EXPECT_EQ(*reading, "200G = 200 x 10^9 B = 186.26 GiB (a Kubernetes quantity; 200Gi is 200 x 2^30)");
  EXPECT_FALSE(kubernetes_letter_reading("200Gi", 200 * kGiB).has_value());
  EXPECT_FALSE(kubernetes_letter_reading("200GB", 200'000'000'000u).has_value());
  EXPECT_FALSE(kubernetes_letter_reading("200B", 200).has_value());
}

}  // namespace
}  // namespace engram

namespace engram {
namespace {

using ::testing::ElementsAre;

TEST(FixesOnce, ALongFixRepeatedOverLinesIsSaidOnceAndReferencedAfter) {
  const std::string fix_a = "put fewer ranks on each host, give the host's real RAM with host_memory (--host-memory)";
  const std::string fix_b = "or keep the tables on the GPUs (cpu_offload: false), which every placement here allows";
  const std::vector<std::string> said = say_fixes_once({
      "host_private: does not fit; " + fix_a + "; " + fix_b,
      "sglang_file: does not fit; " + fix_a + "; " + fix_b,
      "host_shared: available",
      "sglang_shared: short fix; " + fix_b,
  });
  ASSERT_EQ(said.size(), 4u);
  EXPECT_EQ(said[0], "host_private: does not fit; [fix 1] " + fix_a + "; [fix 2] " + fix_b);
  EXPECT_EQ(said[1], "sglang_file: does not fit; (fixes 1-2 above)");
  EXPECT_EQ(said[2], "host_shared: available");
  EXPECT_EQ(said[3], "sglang_shared: short fix; (fix 2 above)");
  // Said once in all: the long text appears a single time.
  std::string all;
  for (const std::string& s : said) all += s + "\n";
  EXPECT_EQ(all.find(fix_a), all.rfind(fix_a));
  // Nothing repeated: unchanged.
  EXPECT_THAT(say_fixes_once({"a; b", "c"}), ElementsAre("a; b", "c"));
}

}  // namespace
}  // namespace engram
