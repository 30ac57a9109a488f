// The memory fit (core/plan/memory_fit.h) on container limits: what a
// memory limit over ranks is charged with (a rank's host tables, the
// /dev/shm copy its host's writer writes, its pinned lookup staging), a
// container's or pod's limit over every rank it holds, limits alike named
// in one sentence, and a Kubernetes sizeLimit below the /dev/shm copy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/base/units.h"
#include "core/lookup/tp_heads.h"
#include "core/model/table_spec.h"
#include "core/placements/host_rows_on_device.h"
#include "core/plan/memory_fit.h"
#include "tests/deployment_fixtures.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::kFlashTableBytesTotal;

// plan, then the fit, as `plan` runs them.
Status fit(const Deployment& d) {
  WarningSink sink;
  auto plan = plan_deployment(d, sink);
  EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
  return plan.is_ok() ? check_memory_fits(plan.value()) : plan.status();
}

Deployment host_private_dp(int dp, int tp = 1) {
  Deployment d = testing::deployment(1, dp * tp, tp, dp, 64 * kMiB);
  d.hosts[0].host_memory_bytes = 4096 * kGiB;
  d.config.cpu_offload = true;
  d.config.dp_shared_memory = false;
  return d;
}

uint64_t v41_pinned_bytes(int tp) {
  auto v41 = model_preset("deepseek-v4.1-flash");
  EXPECT_TRUE(v41.is_ok());
  return host_lookup_pinned_bytes(v41.value(), 1024, tp > 1, tp);
}

// Only host_shared's writer (the host's first rank) writes the node's copy
// into its cgroup; the readers map it and are charged nothing for it.
TEST(MemoryFit, TheSharedCopyIsChargedToItsWriterOnly) {
  Deployment d = testing::dep4_gb200(256 * kGiB);
  d.hosts[0].memory_limit_bytes_per_rank = 64 * kGiB;
  const Status s = fit(d);
  ASSERT_EQ(s.code(), ErrorCode::kResourceExhausted) << s.to_string();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("rank 0 on host n0 (host_shared) runs under a memory limit of 64.0 GiB"),
                                 HasSubstr("the node's /dev/shm copy it writes 188.8 GiB"),
                                 HasSubstr("memory_limit_per_rank: 197GiB"), Not(HasSubstr("rank 1 on"))));
  d.hosts[0].memory_limit_bytes_per_rank = 190 * kGiB;
  EXPECT_TRUE(fit(d).is_ok());
}

// A container's or pod's limit covers all its ranks together.
TEST(MemoryFit, AContainerLimitCoversEveryRankItHolds) {
  Deployment d = host_private_dp(4);
  const uint64_t pinned = v41_pinned_bytes(1);
  const uint64_t together = 4 * (kFlashTableBytesTotal + pinned);
  d.hosts[0].memory_limit_bytes = together - 1;
  const Status s = fit(d);
  ASSERT_EQ(s.code(), ErrorCode::kResourceExhausted) << s.to_string();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("ranks 0-3 on host n0 (host_private) share a memory limit of"),
                                 HasSubstr("(one container or pod)"), HasSubstr("they will hold together"),
                                 HasSubstr("memory_limit: 788GiB"), HasSubstr("docker run --memory=788g"),
                                 HasSubstr("resources.limits.memory: 788Gi over the pod's containers")));
  d.hosts[0].memory_limit_bytes = together;
  EXPECT_TRUE(fit(d).is_ok()) << fit(d).to_string();
  // A limit per rank of one table each holds the same ranks apart.
  d.hosts[0].memory_limit_bytes.reset();
  d.hosts[0].memory_limit_bytes_per_rank = kFlashTableBytesTotal + pinned;
  EXPECT_TRUE(fit(d).is_ok());
}

// Pinned staging is charged besides the tables: a limit of the TP slice
// alone is one staging buffer short.
TEST(MemoryFit, PinnedStagingIsChargedBesidesTheTables) {
  Deployment d = host_private_dp(1, 4);
  auto v41 = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(v41.is_ok());
  uint64_t slice = 0;  // the largest TP slice (they differ by a few rows)
  for (int t = 0; t < 4; ++t) slice = std::max(slice, tp_slice_host_bytes(v41.value(), 4, t));
  const uint64_t pinned = v41_pinned_bytes(4);
  ASSERT_GT(pinned, 0u);
  d.hosts[0].memory_limit_bytes_per_rank = slice;
  const Status s = fit(d);
  ASSERT_EQ(s.code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("each run under a memory limit of 47.2 GiB, below what each will hold in its own memory (up to 47.2 GiB: host tables"),
                                 HasSubstr("pinned lookup staging")));
  d.hosts[0].memory_limit_bytes_per_rank = slice + pinned;
  EXPECT_TRUE(fit(d).is_ok()) << fit(d).to_string();
}

// Many ranks under alike limits make one sentence, not one per rank.
TEST(MemoryFit, AlikeLimitsAreNamedOnce) {
  Deployment d = host_private_dp(8);
  d.hosts[0].memory_limit_bytes_per_rank = 1 * kGiB;
  const Status s = fit(d);
  ASSERT_EQ(s.code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("ranks 0-7 on host(s) n0 (host_private) each run under a memory limit of 1.0 GiB"));
  EXPECT_EQ(s.message().find("memory_limit_per_rank"), s.message().rfind("memory_limit_per_rank"));
}

// A Kubernetes emptyDir's sizeLimit below the node's copy: refused with the
// sizeLimit to set, which reads back (as Kubernetes reads it) to at least the copy.
TEST(MemoryFit, ASizeLimitBelowTheCopyNamesTheOneToSet) {
  Deployment d = testing::dep4_gb200(1024 * kGiB);
  d.hosts[0].tmpfs_bytes_enforced = 100 * kGiB;
  const Status s = fit(d);
  ASSERT_EQ(s.code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("host(s) n0 (host_shared): the node's /dev/shm copy takes 188.8 GiB"),
                                 HasSubstr("more than the 100.0 GiB"), HasSubstr("sizeLimit: 190Gi")));
  d.hosts[0].tmpfs_bytes_enforced = kFlashTableBytesTotal;
  EXPECT_TRUE(fit(d).is_ok());
}

// The limits a runtime found stand for the deployment's own.
TEST(MemoryFit, PlanThatFitsTakesTheLimitsItIsGiven) {
  const Deployment d = host_private_dp(2);
  WarningSink sink;
  EXPECT_TRUE(plan_that_fits(d, sink).is_ok());
  const std::vector<MemoryLimitScope> found = {{0, {1}, 1 * kGiB}};
  const auto refused = plan_that_fits(d, sink, &found);
  ASSERT_EQ(refused.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("rank 1 on host n0 (host_private) runs under a memory limit of 1.0 GiB"));
}

}  // namespace
}  // namespace engram
