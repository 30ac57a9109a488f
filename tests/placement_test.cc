#include "core/plan/placement_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/base/units.h"
#include "core/deployment_file/deployment_yaml.h"
#include "core/plan/deployment_plan.h"
#include "tests/deployment_fixtures.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::kFlashTableBytesTotal;

// A rank's host: `group` its node-local group, `mounted` and `total` its /dev/shm.
HostShmFacts host(int group, bool mounted, uint64_t total) { return {"n0", mounted, total, group}; }

PlacementDecision decide(const EngramConfig& config, int dp, const HostShmFacts& facts, bool elastic = false) {
  ParallelLayout layout;
  layout.dp = dp;
  layout.elastic_ep = elastic;
  return decide_rank_placement(config, resolve_dp_shared_memory(config, layout), facts, kFlashTableBytesTotal);
}

const HostShmFacts kGood = host(4, true, 190 * kGiB);

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
  PlacementDecision alone = decide(c, 4, host(1, true, 190 * kGiB));
  EXPECT_EQ(alone.placement, Placement::kHostHeadSharded);
  EXPECT_THAT(alone.fallback_causes, ElementsAre(FallbackCause::kGroupSizeOne));
  PlacementDecision missing = decide(c, 4, host(4, false, 0));
  EXPECT_EQ(missing.placement, Placement::kHostHeadSharded);
  EXPECT_THAT(missing.fallback_causes, ElementsAre(FallbackCause::kShmMissing));
  PlacementDecision small = decide(c, 4, host(4, true, 64 * kMiB));
  EXPECT_EQ(small.placement, Placement::kHostHeadSharded);
  EXPECT_THAT(small.fallback_causes, ElementsAre(FallbackCause::kShmTooSmall));
  EXPECT_THAT(small.reason, HasSubstr("64 MiB < tables 188.8 GiB"));
  // One byte short of the tables is too small; exactly the tables is enough.
  EXPECT_EQ(decide(c, 4, host(4, true, kFlashTableBytesTotal - 1)).placement, Placement::kHostHeadSharded);
  EXPECT_EQ(decide(c, 4, host(4, true, kFlashTableBytesTotal)).placement, Placement::kHostShared);
}

// The fallback warnings of host_shared's capability check over these hosts.
std::vector<Warning> warnings_for(std::vector<HostShmFacts> hosts) {
  return fallback_warnings(host_shared_fitness(hosts, kFlashTableBytesTotal), kFlashTableBytesTotal);
}

// The one warning of `key` among `warnings` (none: a failed expectation and an empty one).
Warning only(const std::vector<Warning>& warnings, const std::string& key) {
  Warning found;
  int count = 0;
  for (const Warning& w : warnings)
    if (w.key == key) {
      found = w;
      ++count;
    }
  EXPECT_EQ(count, 1) << key;
  return found;
}

// The capability check returns every cause with each host's own size and
// environment, on every host.
TEST(Placement, TheShmCheckReturnsEveryCauseWithEachHostsSize) {
  const std::vector<HostShmFacts> hosts = {{"a", true, 64 * kMiB, 1, RuntimeEnvironment::kDocker},
                                           {"b", true, 190 * kGiB, 4, RuntimeEnvironment::kBareMetal},
                                           {"c", false, 0, 4, RuntimeEnvironment::kKubernetes},
                                           {"d", true, 100 * kGiB, 4, RuntimeEnvironment::kDocker}};
  const std::vector<HostShmUnmet> unfit = host_shared_fitness(hosts, kFlashTableBytesTotal);
  ASSERT_EQ(unfit.size(), 3u);
  EXPECT_EQ(unfit[0].host.host_name, "a");
  EXPECT_THAT(unfit[0].causes, ElementsAre(FallbackCause::kGroupSizeOne, FallbackCause::kShmTooSmall));
  EXPECT_EQ(unfit[0].host.tmpfs_bytes_total, 64 * kMiB);
  EXPECT_EQ(unfit[1].host.host_name, "c");
  EXPECT_THAT(unfit[1].causes, ElementsAre(FallbackCause::kShmMissing));
  EXPECT_EQ(unfit[2].host.host_name, "d");
  EXPECT_THAT(unfit[2].causes, ElementsAre(FallbackCause::kShmTooSmall));
  EXPECT_EQ(unmet_text(FallbackCause::kShmTooSmall, unfit[2].host, kFlashTableBytesTotal),
            "/dev/shm tmpfs total 100.0 GiB < tables 188.8 GiB");
}

// Two hosts whose /dev/shm are both too small, of two sizes: one warning,
// each host with its own size (it kept only the last host's size once), the
// fixes of the hosts' own environments; plan of such a deployment says the
// same, and the strict error names both sizes with the same fixes.
TEST(Placement, OneShmWarningNamesEveryHostsSize) {
  const std::vector<Warning> three =
      warnings_for({{"a", true, 64 * kMiB, 4}, {"b", true, 100 * kGiB, 4}, {"c", true, 64 * kMiB, 4}});
  ASSERT_EQ(three.size(), 1u);
  EXPECT_THAT(three[0].text, HasSubstr("/dev/shm on host(s) a, c (64 MiB) and b (100.0 GiB) is smaller (tmpfs totals) "
                                       "than the tables' 188.8 GiB"));
  // Each host's environment: a Docker host and a Kubernetes one name those two fixes, not the bare host's.
  const Warning two = only(warnings_for({{"a", true, 64 * kMiB, 4, RuntimeEnvironment::kDocker},
                                         {"b", true, 100 * kGiB, 4, RuntimeEnvironment::kKubernetes}}),
                           "dp_shared_memory.fallback.shm_too_small");
  EXPECT_THAT(two.text, HasSubstr("host(s) a (64 MiB) and b (100.0 GiB)"));
  EXPECT_THAT(two.text, AllOf(HasSubstr("--shm-size=190g"), HasSubstr("sizeLimit: 190Gi"), Not(HasSubstr("remount"))));
  auto d = parse_deployment_text(R"(
hosts:
  - {name: a, gpus: 4, gpu_model: H200, shm_size: 64MiB, environment: docker}
  - {name: b, gpus: 4, gpu_model: H200, shm_size: 100GiB, environment: kubernetes}
layout: {tp: 1, dp: 8}
config: {cpu_offload: true}
)",
                                 "two_sizes");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  WarningSink sink;
  auto plan = plan_deployment(*d, sink);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(only(plan->warnings, "dp_shared_memory.fallback.shm_too_small").text, two.text);
  d->config.dp_shared_memory = true;
  const Status strict = plan_deployment(*d, sink).status();
  EXPECT_EQ(strict.code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(strict.message(), AllOf(HasSubstr("/dev/shm too small on host(s) a: 188.8 GiB needed, 64 MiB available"),
                                      HasSubstr("/dev/shm too small on host(s) b: 188.8 GiB needed, 100.0 GiB available"),
                                      HasSubstr("--shm-size=190g"), HasSubstr("sizeLimit: 190Gi"),
                                      Not(HasSubstr("remount"))));
}

TEST(Placement, FallbackWarningsNameCauseAndFix) {
  Warning small = only(warnings_for({{"n0", true, 64 * kMiB, 4}}), "dp_shared_memory.fallback.shm_too_small");
  EXPECT_THAT(small.text, HasSubstr("188.8 GiB"));
  EXPECT_THAT(small.text, HasSubstr("64 MiB"));
  EXPECT_THAT(small.text, HasSubstr("host_head_sharded"));
  // Environment unknown: every fix, each under its name, and the opt-out.
  EXPECT_THAT(small.text, HasSubstr("Docker: start the container with --shm-size=190g, or --ipc=host"));
  EXPECT_THAT(small.text, HasSubstr("Kubernetes: mount an emptyDir volume with medium: Memory and sizeLimit: 190Gi"));
  EXPECT_THAT(small.text, HasSubstr("bare metal: mount -o remount,size=190G /dev/shm"));
  EXPECT_THAT(small.text, HasSubstr("dp_shared_memory: false"));
  EXPECT_THAT(small.text, Not(HasSubstr("rule")));
  Warning alone = only(warnings_for({{"n0", true, 190 * kGiB, 1}, {"n1", true, 190 * kGiB, 1}}),
                       "dp_shared_memory.fallback.group_size_1");
  EXPECT_THAT(alone.text, HasSubstr("co-located"));
  EXPECT_THAT(alone.text, HasSubstr("--ipc=host"));
  EXPECT_THAT(alone.text, HasSubstr("IPC namespace"));
  EXPECT_THAT(alone.text, HasSubstr("hostIPC: true"));
  EXPECT_THAT(alone.text, HasSubstr("dp_shared_memory: false"));
  EXPECT_THAT(alone.text, HasSubstr("n0, n1"));
  Warning missing = only(warnings_for({{"n0", false, 0, 4}}), "dp_shared_memory.fallback.shm_missing");
  EXPECT_THAT(missing.text, HasSubstr("/dev/shm is missing"));
  EXPECT_THAT(missing.text, HasSubstr("--shm-size"));
  EXPECT_THAT(missing.text, HasSubstr("--ipc=host"));
  EXPECT_THAT(peer_precedence_warning().text, HasSubstr("precedence"));
}

TEST(Placement, FallbackWarningsNameOnlyTheFixThatApplies) {
  const Warning bare = only(warnings_for({{"n0", true, 64 * kMiB, 4, RuntimeEnvironment::kBareMetal}}),
                            "dp_shared_memory.fallback.shm_too_small");
  EXPECT_THAT(bare.text, HasSubstr("mount -o remount,size=190G /dev/shm"));
  EXPECT_THAT(bare.text, Not(HasSubstr("--shm-size")));
  EXPECT_THAT(bare.text, Not(HasSubstr("--ipc=host")));
  EXPECT_THAT(bare.text, Not(HasSubstr("emptyDir")));
  const Warning k8s = only(warnings_for({{"n0", true, 64 * kMiB, 4, RuntimeEnvironment::kKubernetes}}),
                           "dp_shared_memory.fallback.shm_too_small");
  EXPECT_THAT(k8s.text, HasSubstr("emptyDir"));
  EXPECT_THAT(k8s.text, Not(HasSubstr("--shm-size")));
  const Warning docker = only(warnings_for({{"n0", true, 190 * kGiB, 1, RuntimeEnvironment::kDocker}}),
                              "dp_shared_memory.fallback.group_size_1");
  EXPECT_THAT(docker.text, HasSubstr("--ipc=host"));
  EXPECT_THAT(docker.text, Not(HasSubstr("hostIPC")));
}

}  // namespace
}  // namespace engram
