#include "core/plan/placement_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/base/units.h"
#include "core/deployment/deployment_yaml.h"
#include "core/plan/deployment_plan.h"
#include "tests/deployment_fixtures.h"

namespace engram {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::kFlashTableBytesTotal;

PlacementDecision decide(const EngramConfig& config, int dp, RankHostFacts facts, bool elastic = false) {
  ParallelLayout layout;
  layout.dp = dp;
  layout.elastic_ep = elastic;
  return decide_rank_placement(config, resolve_dp_shared_memory(config, layout), facts, kFlashTableBytesTotal);
}

const RankHostFacts kGood{4, true, 190 * kGiB};

TEST(Placement, NamesRoundTrip) {
  ASSERT_EQ(placement_registry().size(), kPlacementCount);
  for (const PlacementOps& ops : placement_registry()) {
    auto parsed = parse_placement(placement_name(ops.id));
    ASSERT_TRUE(parsed.is_ok()) << ops.name;
    EXPECT_EQ(parsed.value(), ops.id);
  }
  EXPECT_EQ(parse_placement("host").status().code(), ErrorCode::kInvalidArgument);
}

TEST(Placement, NoOffloadIsDeviceCollectiveOrPeer) {
  EngramConfig c;
  EXPECT_EQ(decide(c, 4, kGood).placement, Placement::kDeviceCollective);
  c.peer_shards = true;
  PlacementDecision d = decide(c, 4, kGood);
  EXPECT_EQ(d.placement, Placement::kDevicePeer);
  EXPECT_FALSE(d.peer_precedence);
}

TEST(Placement, PeerShardsTakePrecedenceOverHostTable) {
  EngramConfig c;
  c.cpu_offload = true;
  c.peer_shards = true;
  PlacementDecision d = decide(c, 4, kGood);
  EXPECT_EQ(d.placement, Placement::kDevicePeer);
  EXPECT_TRUE(d.peer_precedence);
  EXPECT_THAT(d.reason, HasSubstr("takes precedence"));
  // Also when the host table is asked for only through dp_shared_memory: true.
  EngramConfig e;
  e.peer_shards = true;
  e.dp_shared_memory = true;
  EXPECT_TRUE(decide(e, 4, kGood).peer_precedence);
}

TEST(Placement, OffloadWithSharingEnabledAndWorkingIsHostShared) {
  EngramConfig c;
  c.cpu_offload = true;
  PlacementDecision d = decide(c, 4, kGood);
  EXPECT_EQ(d.placement, Placement::kHostShared);
  EXPECT_TRUE(d.fallback_causes.empty());
  c.dp_shared_memory = true;  // strict, already validated
  EXPECT_EQ(decide(c, 4, kGood).placement, Placement::kHostShared);
}

TEST(Placement, OffloadWithSharingDisabledIsHostPrivate) {
  EngramConfig c;
  c.cpu_offload = true;
  EXPECT_EQ(decide(c, 1, kGood).placement, Placement::kHostPrivate);          // dp = 1
  EXPECT_EQ(decide(c, 4, kGood, true).placement, Placement::kHostPrivate);    // elastic EP
  c.dp_shared_memory = false;
  EXPECT_EQ(decide(c, 4, kGood).placement, Placement::kHostPrivate);          // explicit false
}

TEST(Placement, EachFallbackCauseGivesHostHeadSharded) {
  EngramConfig c;
  c.cpu_offload = true;
  PlacementDecision alone = decide(c, 4, {1, true, 190 * kGiB});
  EXPECT_EQ(alone.placement, Placement::kHostHeadSharded);
  EXPECT_THAT(alone.fallback_causes, ElementsAre(FallbackCause::kGroupSizeOne));
  PlacementDecision missing = decide(c, 4, {4, false, 0});
  EXPECT_EQ(missing.placement, Placement::kHostHeadSharded);
  EXPECT_THAT(missing.fallback_causes, ElementsAre(FallbackCause::kShmMissing));
  PlacementDecision small = decide(c, 4, {4, true, 64 * kMiB});
  EXPECT_EQ(small.placement, Placement::kHostHeadSharded);
  EXPECT_THAT(small.fallback_causes, ElementsAre(FallbackCause::kShmTooSmall));
  EXPECT_THAT(small.reason, HasSubstr("64 MiB < tables 188.8 GiB"));
  // One byte short of the tables is too small; exactly the tables is enough.
  EXPECT_EQ(decide(c, 4, {4, true, kFlashTableBytesTotal - 1}).placement, Placement::kHostHeadSharded);
  EXPECT_EQ(decide(c, 4, {4, true, kFlashTableBytesTotal}).placement, Placement::kHostShared);
}

// Two hosts whose /dev/shm are both too small, of two sizes: one warning,
// each host with its own size (it kept only the last host's size once); plan
// of such a deployment says the same.
TEST(Placement, OneShmWarningNamesEveryHostsSize) {
  const Warning two = fallback_warning(FallbackCause::kShmTooSmall, {"a", "b", "c"}, kFlashTableBytesTotal,
                                       std::vector<uint64_t>{64 * kMiB, 100 * kGiB, 64 * kMiB},
                                       RuntimeEnvironment::kUnknown);
  EXPECT_THAT(two.text, HasSubstr("/dev/shm on host(s) a, c (64 MiB) and b (100.0 GiB) is smaller (tmpfs totals) than "
                                  "the tables' 188.8 GiB"));
  auto d = parse_deployment_text(R"(
hosts:
  - {name: a, gpus: 4, gpu_model: H200, shm_size: 64MiB}
  - {name: b, gpus: 4, gpu_model: H200, shm_size: 100GiB}
layout: {tp: 1, dp: 8}
config: {cpu_offload: true}
)",
                                 "two_sizes");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  WarningSink sink;
  auto plan = plan_deployment(*d, sink);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  int shm_warnings = 0;
  for (const Warning& w : plan->warnings) {
    if (w.key != "dp_shared_memory.fallback.shm_too_small") continue;
    ++shm_warnings;
    EXPECT_THAT(w.text, HasSubstr("host(s) a (64 MiB) and b (100.0 GiB)"));
  }
  EXPECT_EQ(shm_warnings, 1);
}

TEST(Placement, FallbackWarningsNameCauseAndFix) {
  Warning small = fallback_warning(FallbackCause::kShmTooSmall, {"n0"}, kFlashTableBytesTotal, 64 * kMiB);
  EXPECT_EQ(small.key, "dp_shared_memory.fallback.shm_too_small");
  EXPECT_THAT(small.text, HasSubstr("188.8 GiB"));
  EXPECT_THAT(small.text, HasSubstr("64 MiB"));
  EXPECT_THAT(small.text, HasSubstr("host_head_sharded"));
  // Environment unknown: every fix, each under its name, and the opt-out.
  EXPECT_THAT(small.text, HasSubstr("Docker: start the container with --shm-size=189g, or --ipc=host"));
  EXPECT_THAT(small.text, HasSubstr("Kubernetes: mount an emptyDir volume with medium: Memory and sizeLimit: 189Gi"));
  EXPECT_THAT(small.text, HasSubstr("bare metal: mount -o remount,size=189G /dev/shm"));
  EXPECT_THAT(small.text, HasSubstr("dp_shared_memory: false"));
  EXPECT_THAT(small.text, Not(HasSubstr("rule")));
  Warning alone = fallback_warning(FallbackCause::kGroupSizeOne, {"n0", "n1"}, kFlashTableBytesTotal, 0);
  EXPECT_THAT(alone.text, HasSubstr("co-located"));
  EXPECT_THAT(alone.text, HasSubstr("--ipc=host"));
  EXPECT_THAT(alone.text, HasSubstr("IPC namespace"));
  EXPECT_THAT(alone.text, HasSubstr("hostIPC: true"));
  EXPECT_THAT(alone.text, HasSubstr("dp_shared_memory: false"));
  EXPECT_THAT(alone.text, HasSubstr("n0, n1"));
  Warning missing = fallback_warning(FallbackCause::kShmMissing, {"n0"}, kFlashTableBytesTotal, 0);
  EXPECT_THAT(missing.text, HasSubstr("/dev/shm is missing"));
  EXPECT_THAT(missing.text, HasSubstr("--shm-size"));
  EXPECT_THAT(missing.text, HasSubstr("--ipc=host"));
  EXPECT_NE(alone.key, missing.key);
  EXPECT_THAT(peer_precedence_warning().text, HasSubstr("precedence"));
}

TEST(Placement, FallbackWarningsNameOnlyTheFixThatApplies) {
  const Warning bare = fallback_warning(FallbackCause::kShmTooSmall, {"n0"}, kFlashTableBytesTotal, 64 * kMiB,
                                        RuntimeEnvironment::kBareMetal);
  EXPECT_THAT(bare.text, HasSubstr("mount -o remount,size=189G /dev/shm"));
  EXPECT_THAT(bare.text, Not(HasSubstr("--shm-size")));
  EXPECT_THAT(bare.text, Not(HasSubstr("--ipc=host")));
  EXPECT_THAT(bare.text, Not(HasSubstr("emptyDir")));
  const Warning k8s = fallback_warning(FallbackCause::kShmTooSmall, {"n0"}, kFlashTableBytesTotal, 64 * kMiB,
                                       RuntimeEnvironment::kKubernetes);
  EXPECT_THAT(k8s.text, HasSubstr("emptyDir"));
  EXPECT_THAT(k8s.text, Not(HasSubstr("--shm-size")));
  const Warning docker = fallback_warning(FallbackCause::kGroupSizeOne, {"n0"}, kFlashTableBytesTotal, 0,
                                          RuntimeEnvironment::kDocker);
  EXPECT_THAT(docker.text, HasSubstr("--ipc=host"));
  EXPECT_THAT(docker.text, Not(HasSubstr("hostIPC")));
}

}  // namespace
}  // namespace engram
