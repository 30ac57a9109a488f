// The closest names to a slip: what "did you mean" offers for flags and
// YAML fields.
#include "core/base/did_you_mean.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace engram {
namespace {

TEST(DidYouMean, DistanceCountsEditsAndSwapsIgnoringCaseAndUnderscores) {
  EXPECT_EQ(name_distance("tp-size", "tp-size"), 0u);
  EXPECT_EQ(name_distance("tp-sise", "tp-size"), 1u);
  EXPECT_EQ(name_distance("nproc_per_node", "nproc-per-node"), 0u);
  EXPECT_EQ(name_distance("H200", "h200"), 0u);
  EXPECT_EQ(name_distance("palcement", "placement"), 1u);  // a swap is one edit
  EXPECT_EQ(name_distance("", "abc"), 3u);
  EXPECT_EQ(name_distance("kitten", "sitting"), 3u);
}

TEST(DidYouMean, OffersOnlyTheClosestAndOnlyWhenClose) {
  const std::vector<std::string> flags = {"tp", "tp-size", "dp", "dp-size", "seed", "shm-size"};
  EXPECT_EQ(closest_names("tp-sise", flags), std::vector<std::string>{"tp-size"});
  EXPECT_EQ(closest_names("sed", flags), std::vector<std::string>{"seed"});
  EXPECT_TRUE(closest_names("bogus", flags).empty());
  EXPECT_TRUE(closest_names("x", flags).empty());
  EXPECT_EQ(closest_names("tq", flags), (std::vector<std::string>{"tp"}));
  EXPECT_EQ(did_you_mean("sed", flags), "did you mean 'seed'?");
  EXPECT_EQ(did_you_mean("xp-size", flags, false), "did you mean tp-size or dp-size?");
  EXPECT_EQ(did_you_mean("bogus", flags), "");
  EXPECT_TRUE(closest_names(std::string(100000, 'a'), flags).empty());  // bounded work
}

}  // namespace
}  // namespace engram
