// What vLLM builds with no cpu_offload: the placement device_head_sharded,
// its heads cut over TP x the node-local Engram DP group, TP-major
// (vllm/models/deepseek_v4_1/nvidia/engram.py: ParallelEngramEmbedding's
// shard info is tp_size x get_engram_dp_size() at engram_head_shard_rank()
// whatever cpu_offload; vllm/config/engram.py enable_engram_dp_sharding,
// default true).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "core/engines/engine_profile.h"
#include "core/placements/device_head_sharded.h"
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
// cuts heads over TP 2 x its Engram DP group of 2 (each host holds 2 whole
// replicas, _engram_dp_shard_size = gcd(4, 2)): a quarter of the heads per
// GPU, numbered TP-major.
TEST(EngineProfileHeadSharded, VllmDeviceLayoutIsHeadShardedOverTpTimesTheEngramDpGroup) {
  WarningSink quiet;
  const Result<PlanResult> vllm = plan_deployment(two_hosts(EngineId::kVllm), quiet);
  ASSERT_TRUE(vllm.is_ok()) << vllm.status().to_string();
  const Result<PlanResult> ours = plan_deployment(two_hosts(EngineId::kEngramlab), quiet);
  ASSERT_TRUE(ours.is_ok()) << ours.status().to_string();
  EXPECT_EQ(vllm->deployment.config.shard_group, ShardGroup::kEngramDp);
  const int tp_major[] = {0, 2, 1, 3};  // rank = dp_rank x 2 + tp_rank -> tp_rank x 2 + dp_rank in the group
  for (const RankPlan& r : vllm->ranks) {
    EXPECT_EQ(r.placement, Placement::kDeviceHeadSharded);
    EXPECT_EQ(r.shard_group, r.rank / 4) << r.rank;
    EXPECT_EQ(r.shard_group_size, 4) << r.rank;
    EXPECT_EQ(r.shard_index, tp_major[r.rank % 4]) << r.rank;
  }
  for (const RankPlan& r : ours->ranks) EXPECT_EQ(r.placement, Placement::kDeviceCollective);
  // Each GPU's HBM is its TP-major slice of the heads (6 of 24 each here).
  const Result<ModelSpec> v41 = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(v41.is_ok());
  for (const RankPlan& r : vllm->ranks)
    EXPECT_EQ(r.memory.hbm_table_bytes, device_head_shard_hbm_bytes(*v41, 4, r.shard_index, 2u << 20)) << r.rank;
  // A quarter of the heads' rows per GPU against an eighth of the rows (and the buffers).
  const double ratio = static_cast<double>(vllm->hosts[0].hbm_bytes_per_gpu_max) /
                       static_cast<double>(ours->hosts[0].hbm_bytes_per_gpu_max);
  EXPECT_GT(ratio, 1.9);
  EXPECT_LT(ratio, 2.1);
}

// vLLM's matrix with no cpu_offload, bitwise on the emulator (one host of
// 4: the Engram DP group is every replica, the heads cut over all 4 GPUs).
TEST(EngineProfileHeadSharded, VllmDeviceMatrixOnTheEmulator) {
  ASSERT_TRUE(parse_placement("device_head_sharded").is_ok()) << "device_head_sharded is not registered";
  auto cases = testing::tp_matrix_cases_of_engine("vllm", {{"device_head_sharded", "64MiB", "cpu_offload: false"}});
  ASSERT_EQ(cases.size(), 6u);
  for (testing::TpMatrixCase& c : cases) c.plan_with_lookup_model = true;
  testing::run_tp_matrix_on_emulator(cases);
}

// At tp 1 x dp 8 over two hosts of 4, vLLM's Engram DP group is each host's
// 4 replicas: a quarter of V4.1's tables per GPU, which fits. Interleave the
// replicas over the hosts and its group falls back to 1
// (_engram_dp_shard_size: a node's ranks are not one contiguous range), so
// every GPU would hold the whole tables (188.9 GiB), which the memory fit
// refuses, unless embedding_across_dp cuts them over TP x DP.
TEST(EngineProfileHeadSharded, VllmTp1TablesAreCutOverEachHostsReplicasAndWholeWhereTheGroupFallsBack) {
  Deployment d = two_hosts(EngineId::kVllm);
  d.layout.tp = 1;
  d.layout.dp = 8;
  WarningSink quiet;
  const Result<PlanResult> by_host = plan_deployment(d, quiet);
  ASSERT_TRUE(by_host.is_ok()) << by_host.status().to_string();
  EXPECT_EQ(by_host->deployment.config.shard_group, ShardGroup::kEngramDp);
  for (const RankPlan& r : by_host->ranks) {
    EXPECT_EQ(r.shard_group_size, 4) << r.rank;
    EXPECT_EQ(r.shard_index, r.rank % 4) << r.rank;
  }
  EXPECT_TRUE(check_memory_fits(*by_host).is_ok()) << check_memory_fits(*by_host).to_string();
  d.rank_hosts = {0, 1, 0, 1, 0, 1, 0, 1};
  const Result<PlanResult> interleaved = plan_deployment(d, quiet);
  ASSERT_TRUE(interleaved.is_ok()) << interleaved.status().to_string();
  for (const RankPlan& r : interleaved->ranks) EXPECT_EQ(r.shard_group_size, 1) << r.rank;
  const Status fits = check_memory_fits(*interleaved);
  EXPECT_EQ(fits.code(), ErrorCode::kResourceExhausted) << fits.to_string();
  d.config.embedding_across_dp = true;
  const Result<PlanResult> across = plan_deployment(d, quiet);  // interleaved still
  ASSERT_TRUE(across.is_ok()) << across.status().to_string();
  EXPECT_TRUE(check_memory_fits(*across).is_ok()) << check_memory_fits(*across).to_string();
  EXPECT_EQ(across->deployment.config.shard_group, ShardGroup::kWorld);
  for (const RankPlan& r : across->ranks) EXPECT_EQ(r.placement, Placement::kDeviceHeadSharded);
}

// vLLM asserts its last head shard keeps a head, over tp x its Engram DP
// group on the device as in host memory, but over tp alone with
// dp_shared_memory (each rank maps its TP slice): tiny's 4 heads at tp 2 x
// dp 3 on one host are 6 shards (1, 1, 1, 1, 0, 0) unless shared.
TEST(EngineProfileHeadSharded, VllmHeadCheckCountsItsEngramDpGroupExceptUnderDpSharedMemory) {
  Deployment d;
  HostSpec h;
  h.name = "a";
  h.gpu_count = 6;
  h.tmpfs_bytes_total = 1ull << 30;
  d.hosts = {h};
  d.model = "tiny";
  d.layout.tp = 2;
  d.layout.dp = 3;
  d.config.cpu_offload_given = true;
  d.engine.profile = EngineId::kVllm;
  WarningSink quiet;
  Result<PlanResult> device = plan_deployment(d, quiet);
  EXPECT_EQ(device.status().code(), ErrorCode::kInvalidArgument) << device.status().to_string();
  EXPECT_THAT(device.status().message(), ::testing::HasSubstr("4 heads over 6 shards (TP 2 x Engram DP group of 3)"));
  d.config.cpu_offload = true;
  d.config.dp_shared_memory = false;
  EXPECT_EQ(plan_deployment(d, quiet).status().code(), ErrorCode::kInvalidArgument);
  d.config.dp_shared_memory = true;
  Result<PlanResult> shared = plan_deployment(d, quiet);
  ASSERT_TRUE(shared.is_ok()) << shared.status().to_string();
  EXPECT_EQ(shared->ranks.front().placement, Placement::kHostShared);
  d.engine.profile = EngineId::kEngramlab;
  d.config = EngramConfig{};
  EXPECT_TRUE(plan_deployment(d, quiet).is_ok());  // row shards: any tp
}

// Batches for any dp: even loads, uneven ones with idle replicas, then 7
// each with replica 1 all DEAD.
std::string batches_of(int dp) {
  const int uneven[] = {7, 0, 5, 1, 3, 0, 2, 6};
  std::string even, second, last;
  for (int d = 0; d < dp; ++d) {
    even += fmt::format("{}8", d ? ", " : "");
    second += fmt::format("{}{}", d ? ", " : "", uneven[d % 8]);
    last += fmt::format("{}7", d ? ", " : "");
  }
  return fmt::format("[{{tokens: [{}]}}, {{tokens: [{}]}}, {{tokens: [{}]{}}}]", even, second, last,
                     dp > 1 ? ", dead: [1]" : "");
}

// vLLM's device tables over its node-local Engram DP group on the emulator,
// bitwise against the CPU rule, where the group is several replicas per host
// and where _engram_dp_shard_size falls back to 1 (interleaved replicas,
// nodes of unequal size, one replica per node): each case's plan cuts every
// rank's group to tp x the expected Engram DP size, then its lookups run.
TEST(EngineProfileHeadSharded, VllmDeviceTablesOverItsEngramDpGroupOnTheEmulator) {
  struct Layout {
    const char* name;
    const char* hosts;       // the scenario's host entries
    const char* rank_hosts;  // "" fills the hosts in order
    int tp, dp;
    int engram_dp;  // vLLM's group size (tests/distributed/test_engram_dp_shard.py's rule)
  };
  const Layout layouts[] = {
      {"two_hosts_tp2_dp4", "[{name: a, gpus: 4}, {name: b, gpus: 4}]", "", 2, 4, 2},
      {"two_hosts_tp1_dp8", "[{name: a, gpus: 4}, {name: b, gpus: 4}]", "", 1, 8, 4},
      {"three_hosts_tp1_dp6", "[{name: a, gpus: 2}, {name: b, gpus: 2}, {name: c, gpus: 2}]", "", 1, 6, 2},
      {"interleaved_tp1_dp4", "[{name: a, gpus: 2}, {name: b, gpus: 2}]", "[a, b, a, b]", 1, 4, 1},
      {"hosts_of_3_and_4_tp1_dp7", "[{name: a, gpus: 3}, {name: b, gpus: 4}]", "", 1, 7, 1},
      {"replica_per_host_tp2_dp2", "[{name: a, gpus: 2}, {name: b, gpus: 2}]", "", 2, 2, 1},
  };
  int ran = 0;
  for (const Layout& l : layouts)
    for (int heads : {8, 7}) {
      const std::string name = fmt::format("vllm_{}_{}h", l.name, heads);
      const std::string text = fmt::format(
          "description: vLLM's device tables over its Engram DP group, {name}\n"
          "model: tiny-{heads}h\n"
          "hosts: {hosts}\n"
          "{rank_hosts}"
          "layout: {{tp: {tp}, dp: {dp}}}\n"
          "config: {{cpu_offload: false}}\n"
          "engine: {{name: vllm}}\n"
          "seed: {seed}\n"
          "lookup: {{model: tiny-{heads}h, batches: {batches}}}\n"
          "expect:\n"
          "  placement: device_head_sharded\n"
          "  lookup_equal: true\n",
          fmt::arg("name", name), fmt::arg("heads", heads), fmt::arg("hosts", l.hosts),
          fmt::arg("rank_hosts", *l.rank_hosts ? fmt::format("rank_hosts: {}\n", l.rank_hosts) : std::string()),
          fmt::arg("tp", l.tp), fmt::arg("dp", l.dp), fmt::arg("seed", 500 + ran), fmt::arg("batches", batches_of(l.dp)));
      auto scenario = harness::parse_scenario_text(text, name);
      ASSERT_TRUE(scenario.is_ok()) << name << ": " << scenario.status().to_string();
      WarningSink quiet;
      const Result<PlanResult> plan = plan_deployment(scenario->deployment, quiet);
      ASSERT_TRUE(plan.is_ok()) << name << ": " << plan.status().to_string();
      EXPECT_EQ(plan->deployment.config.shard_group, ShardGroup::kEngramDp) << name;
      for (const RankPlan& r : plan->ranks) EXPECT_EQ(r.shard_group_size, l.tp * l.engram_dp) << name << " rank " << r.rank;
      testing::expect_scenario_text_passes(name, text);
      ++ran;
    }
  EXPECT_EQ(ran, 12);
}

}  // namespace
}  // namespace engram
