// What vLLM builds with no cpu_offload: the placement device_head_sharded
// (heads over TP; vllm/model_executor/layers/engram/common/engram_parallel.py).
// These tests need that placement registered (it lands on its own branch);
// until then they fail, naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/engines/engine_profile.h"
#include "core/plan/deployment_plan.h"
#include "core/plan/memory_fit.h"
#include "tests/tp_matrix_emulator.h"

namespace engram {
namespace {

Deployment two_hosts(EngineId engine) {
  Deployment d;
  for (const char* name : {"a", "b"}) {
    HostSpec h;
    h.name = name;
    h.gpu_count = 4;
    h.gpu_model = "GB200";
    d.hosts.push_back(h);
  }
  d.layout.tp = 2;
  d.layout.dp = 4;
  d.config.cpu_offload_given = true;  // written off
  d.engine.profile = engine;
  return d;
}

// The example: tp 2 x dp 4 over 2 hosts of 4, no offload. engramlab
// (and SGLang) answer device_collective row shards over all 8 ranks; vLLM
// keeps a head-sharded copy per replica, half the heads per GPU.
TEST(EngineProfileHeadSharded, VllmDeviceLayoutIsHeadSharded) {
  ASSERT_TRUE(parse_placement("device_head_sharded").is_ok()) << "device_head_sharded is not registered";
  WarningSink quiet;
  const Result<PlanResult> vllm = plan_deployment(two_hosts(EngineId::kVllm), quiet);
  ASSERT_TRUE(vllm.is_ok()) << vllm.status().to_string();
  const Result<PlanResult> ours = plan_deployment(two_hosts(EngineId::kEngramlab), quiet);
  ASSERT_TRUE(ours.is_ok()) << ours.status().to_string();
  for (const RankPlan& r : vllm->ranks) EXPECT_STREQ(placement_name(r.placement), "device_head_sharded");
  for (const RankPlan& r : ours->ranks) EXPECT_EQ(r.placement, Placement::kDeviceCollective);
  // Half of 48 heads' rows per GPU against an eighth of the rows.
  EXPECT_GT(vllm->hosts[0].hbm_bytes_per_gpu_max, 3 * ours->hosts[0].hbm_bytes_per_gpu_max);
}

// vLLM's matrix with no cpu_offload, bitwise on the emulator.
// (Planned with the tiny tables looked up: vLLM keeps a head-sharded copy
// per replica, so tp 1 x dp 4 holds V4.1's whole tables on every GPU, which
// the next test shows refused.)
TEST(EngineProfileHeadSharded, VllmDeviceMatrixOnTheEmulator) {
  ASSERT_TRUE(parse_placement("device_head_sharded").is_ok()) << "device_head_sharded is not registered";
  auto cases = testing::tp_matrix_cases_of_engine("vllm", {{"device_head_sharded", "64MiB", "cpu_offload: false"}});
  ASSERT_EQ(cases.size(), 6u);
  for (testing::TpMatrixCase& c : cases) c.plan_with_lookup_model = true;
  testing::run_tp_matrix_on_emulator(cases);
}

// vLLM's device tables are cut over each replica's TP ranks: at tp 1 every
// GPU holds V4.1's whole tables (188.9 GiB), which no H200 holds, unless
// embedding_across_dp cuts them over TP x DP.
TEST(EngineProfileHeadSharded, VllmReplicaCopiesAtTp1AreRefusedUnlessAcrossDp) {
  Deployment d = two_hosts(EngineId::kVllm);
  d.layout.tp = 1;
  d.layout.dp = 8;
  WarningSink quiet;
  const Result<PlanResult> per_replica = plan_deployment(d, quiet);
  ASSERT_TRUE(per_replica.is_ok()) << per_replica.status().to_string();
  EXPECT_EQ(per_replica->deployment.config.shard_group, ShardGroup::kReplica);
  const Status fits = check_memory_fits(*per_replica);
  EXPECT_EQ(fits.code(), ErrorCode::kResourceExhausted) << fits.to_string();
  d.config.embedding_across_dp = true;
  const Result<PlanResult> across = plan_deployment(d, quiet);
  ASSERT_TRUE(across.is_ok()) << across.status().to_string();
  EXPECT_TRUE(check_memory_fits(*across).is_ok()) << check_memory_fits(*across).to_string();
  EXPECT_EQ(across->deployment.config.shard_group, ShardGroup::kWorld);
  for (const RankPlan& r : across->ranks) EXPECT_EQ(r.placement, Placement::kDeviceHeadSharded);
}

}  // namespace
}  // namespace engram
