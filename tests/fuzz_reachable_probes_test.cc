// `fuzz --file F` lists only the coverage probes F's placements can reach:
// around a host_shared deployment, no handle-exchange probe is "never hit".
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/engramlab_command.h"

namespace engram {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_engramlab;

TEST(FuzzReachableProbes, AHostSharedDeploymentIsNotAskedForHandleExchangeProbes) {
  const auto out = run_engramlab(std::string("fuzz --seeds 4 --file ") + ENGRAM_SOURCE_DIR +
                                 "/scenarios/deployments/dep8_gb300_two_nodes.yaml");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_THAT(out.text, HasSubstr("this deployment can reach;"));
  EXPECT_THAT(out.text, HasSubstr("more it cannot"));
  EXPECT_THAT(out.text, Not(HasSubstr("exchange: cleanup after import failure")));
  // Without a deployment every probe is the sweep's to hit.
  const auto drawn = run_engramlab("fuzz --seeds 2");
  EXPECT_THAT(drawn.text, Not(HasSubstr("this deployment can reach")));
}

}  // namespace
}  // namespace engram
