#include "core/plan/config_resolution.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/base/units.h"
#include "tests/deployment_fixtures.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::kFlashTableBytesTotal;

struct Case {
  bool cpu_offload;
  int dp;
  bool elastic_ep;
  bool enabled;
};

TEST(ResolveDpSharedMemory, UnsetFollowsRuleOne) {
  const Case cases[] = {
      {true, 4, false, true},  {true, 1, false, false}, {true, 4, true, false},
      {false, 4, false, false}, {false, 1, true, false}, {true, 2, false, true},
  };
  for (const Case& c : cases) {
    EngramConfig config;
    config.cpu_offload = c.cpu_offload;
    ParallelLayout layout;
    layout.dp = c.dp;
    layout.elastic_ep = c.elastic_ep;
    DpSharedMemoryResolution r = resolve_dp_shared_memory(config, layout);
    EXPECT_EQ(r.enabled, c.enabled) << c.cpu_offload << " " << c.dp << " " << c.elastic_ep;
    EXPECT_FALSE(r.is_explicit);
    EXPECT_THAT(r.reason, HasSubstr("unset means enabled exactly when cpu_offload is on"));
    EXPECT_THAT(r.reason, Not(HasSubstr("rule")));
  }
}

TEST(ResolveDpSharedMemory, ExplicitValuesAreKept) {
  EngramConfig config;
  ParallelLayout layout;  // dp = 1, no offload: unset would resolve disabled
  config.dp_shared_memory = true;
  DpSharedMemoryResolution on = resolve_dp_shared_memory(config, layout);
  EXPECT_TRUE(on.enabled);
  EXPECT_TRUE(on.is_explicit);
  config.cpu_offload = true;
  layout.dp = 4;
  config.dp_shared_memory = false;
  DpSharedMemoryResolution off = resolve_dp_shared_memory(config, layout);
  EXPECT_FALSE(off.enabled);
  EXPECT_TRUE(off.is_explicit);
}

HostShmFacts good_host() { return {"n0", true, 190 * kGiB, 4}; }

TEST(StrictValidation, PassesWhenEveryRequirementHolds) {
  EngramConfig config;
  config.cpu_offload = true;
  config.dp_shared_memory = true;
  ParallelLayout layout;
  layout.dp = 4;
  std::vector<HostShmFacts> hosts = {good_host()};
  EXPECT_TRUE(validate_dp_shared_memory_strict(config, layout, hosts, kFlashTableBytesTotal).is_ok());
}

TEST(StrictValidation, EachRequirementIsNamedAlone) {
  EngramConfig base;
  base.cpu_offload = true;
  base.dp_shared_memory = true;
  ParallelLayout layout;
  layout.dp = 4;
  struct One {
    const char* words;
    EngramConfig config;
    ParallelLayout layout;
    HostShmFacts host;
  };
  std::vector<One> cases;
  {
    One c{"cpu_offload is off", base, layout, good_host()};
    c.config.cpu_offload = false;
    cases.push_back(c);
  }
  {
    One c{"dp = 1", base, layout, good_host()};
    c.layout.dp = 1;
    cases.push_back(c);
  }
  {
    One c{"elastic EP is on", base, layout, good_host()};
    c.layout.elastic_ep = true;
    cases.push_back(c);
  }
  {
    One c{"replicas not co-located", base, layout, good_host()};
    c.host.min_node_local_group_size = 1;
    cases.push_back(c);
  }
  {
    One c{"/dev/shm missing on host(s) n0", base, layout, good_host()};
    c.host.shm_mounted = false;
    c.host.tmpfs_bytes_total = 0;
    cases.push_back(c);
  }
  {
    One c{"188.8 GiB needed, 64 MiB available", base, layout, good_host()};
    c.host.tmpfs_bytes_total = 64 * kMiB;
    cases.push_back(c);
  }
  for (const One& c : cases) {
    std::vector<HostShmFacts> hosts = {c.host};
    Status s = validate_dp_shared_memory_strict(c.config, c.layout, hosts, kFlashTableBytesTotal);
    ASSERT_FALSE(s.is_ok()) << c.words;
    EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr(c.words));
    EXPECT_THAT(s.message(), HasSubstr("1 unmet requirement)"));
  }
}

TEST(StrictValidation, CollectsEveryUnmetRequirementInOneError) {
  EngramConfig config;
  config.dp_shared_memory = true;  // and no offload
  ParallelLayout layout;           // dp = 1
  layout.elastic_ep = true;
  std::vector<HostShmFacts> hosts = {{"a", false, 0, 1}, {"b", true, 64 * kMiB, 1}};
  Status s = validate_dp_shared_memory_strict(config, layout, hosts, kFlashTableBytesTotal);
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.message(), AllOf(HasSubstr("cpu_offload is off"), HasSubstr("dp = 1"), HasSubstr("elastic EP is on"),
                                 HasSubstr("/dev/shm missing on host(s) a"),
                                 HasSubstr("/dev/shm too small on host(s) b: 188.8 GiB needed, 64 MiB available"),
                                 HasSubstr("--shm-size"), HasSubstr("--ipc=host"), HasSubstr("5 unmet requirements")));
  // With dp = 1 a group of one is expected, not a separate co-location failure.
  EXPECT_THAT(s.message(), Not(HasSubstr("replicas not co-located")));
}

TEST(StrictValidation, ManyAlikeHostsMakeOneShortLine) {
  EngramConfig config;
  config.cpu_offload = true;
  config.dp_shared_memory = true;
  ParallelLayout layout;
  layout.dp = 1152;
  std::vector<HostShmFacts> hosts;
  for (int i = 0; i < 288; ++i) hosts.push_back({"h" + std::to_string(i), true, 64 * kMiB, 4});
  Status s = validate_dp_shared_memory_strict(config, layout, hosts, kFlashTableBytesTotal);
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.message(), HasSubstr("h0, h1, h2, h3 and 284 more"));
  EXPECT_LT(s.message().size(), 700u);  // the 288 names would take some 2,000
}

}  // namespace
}  // namespace engram
