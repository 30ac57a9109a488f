// Conformance tables: each engine's own Engram test cases, with the names
// and numbers of its test files, run through engramlab's profile of that
// engine. A rule change that breaks a case names the engine's test.
//
// vLLM: tests/distributed/test_engram_dp_shard.py (vllm-project/vllm @
// 5f0f76b5, the stored snapshot the search tools gave). SGLang: its test
// files are not in the search index; its cases below are the stored reading
// of docs/design.md sections 9-10 and say so.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "core/engines/engine_profile.h"
#include "core/engines/engine_profiles.h"
#include "core/model/request_hasher.h"
#include "core/model/row_format.h"
#include "core/plan/deployment_plan.h"
#include "tests/engine_test_support.h"

namespace engram {
namespace {

using ::testing::HasSubstr;

constexpr char kVllmTest[] = "vllm tests/distributed/test_engram_dp_shard.py";

HostSpec host(std::string name, int gpus) { return testing::gb200_host(std::move(name), gpus, 64ull << 20); }

Deployment world_of(const std::vector<int>& node_of_rank, int dp, int replica) {
  return testing::vllm_world_of(node_of_rank, dp, replica, EngineId::kVllm);
}

std::vector<int> runs(std::initializer_list<std::pair<int, int>> node_counts) {
  std::vector<int> out;
  for (auto [node, count] : node_counts) out.insert(out.end(), static_cast<size_t>(count), node);
  return out;
}

struct ShardSizeCase {
  std::vector<int> node_ids;
  int dp_size, replica_size, expected;
};

// test_engram_dp_shard_size_respects_node_boundaries, its nine parametrized
// cases (node_ids, dp_size, replica_size, expected).
TEST(VllmConformance, TestEngramDpShardSizeRespectsNodeBoundaries) {
  const std::vector<int> interleaved = {0, 1, 0, 1, 0, 1, 0, 1};
  const ShardSizeCase cases[] = {
      {runs({{0, 4}}), 1, 4, 1},
      {runs({{0, 4}}), 4, 1, 4},
      {runs({{0, 4}}), 2, 2, 2},
      {runs({{0, 8}, {1, 8}}), 8, 2, 4},
      {runs({{0, 6}, {1, 6}}), 4, 1, 2},
      {runs({{0, 3}, {1, 4}}), 7, 1, 1},
      {runs({{0, 8}, {1, 8}, {2, 8}}), 8, 3, 1},
      {interleaved, 4, 2, 1},
      {runs({{0, 3}, {1, 5}}), 4, 2, 1},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const ShardSizeCase& c = cases[i];
    const Deployment d = world_of(c.node_ids, c.dp_size, c.replica_size);
    EXPECT_EQ(vllm_engram_dp_size(d), c.expected)
        << kVllmTest << "::test_engram_dp_shard_size_respects_node_boundaries case " << i << " (dp_size " << c.dp_size
        << ", replica_size " << c.replica_size << ")";
  }
}

// test_engram_table_shared_across_dp_replicas, its (tp_size, dp_size) on
// four GPUs of one node: get_engram_dp_size() == dp_size; the group of TP
// rank t is [t + replica x tp]; engram_head_shard_rank() == tp_rank x dp +
// dp_rank (the DP gather brings in neighbouring head shards).
TEST(VllmConformance, TestEngramTableSharedAcrossDpReplicasGroups) {
  for (auto [tp, dp] : {std::pair{1, 4}, std::pair{2, 2}}) {
    Deployment d;
    d.hosts = {host("node0", 4)};
    d.layout.tp = tp;
    d.layout.dp = dp;
    d.engine.profile = EngineId::kVllm;
    d.config.cpu_offload = true;
    d.config.cpu_offload_given = true;
    d.config.dp_shared_memory = false;
    WarningSink quiet;
    const Result<PlanResult> p = plan_deployment(d, quiet);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    const std::string where = fmt::format("{}::test_engram_table_shared_across_dp_replicas (tp_size {}, dp_size {})",
                                          kVllmTest, tp, dp);
    for (const RankPlan& rp : p->ranks) {
      EXPECT_EQ(rp.node_local_group_size, dp) << where << " rank " << rp.rank << ": get_engram_dp_size()";
      const RankPlan& first = p->ranks[static_cast<size_t>(rp.tp_rank)];  // replica 0's rank of this TP rank
      EXPECT_EQ(rp.node_local_group, first.node_local_group) << where << " rank " << rp.rank << ": group ranks";
      // engram_head_shard_rank() = tp_rank x dp + (its place in the group, its DP rank).
      EXPECT_EQ(rp.node_local_index, rp.dp_rank) << where << " rank " << rp.rank << ": engram_head_shard_rank()";
    }
  }
}

// test_engram_hash_padding_has_no_valid_rows (num_tokens 0, 2, 4 in a slot
// of 4): idle and padded slots must not query row zero: no row read.
TEST(VllmConformance, TestEngramHashPaddingHasNoValidRows) {
  for (int num_tokens : {0, 2, 4})
    EXPECT_EQ(padding_rows_read(engine_profile(EngineId::kVllm), 0, 4 - num_tokens, 24), 0)
        << kVllmTest << "::test_engram_hash_padding_has_no_valid_rows[" << num_tokens << "]";
}

// `_reference`: scales = (scales << 23).view(float32), for every byte.
TEST(VllmConformance, ReferenceDecodesScaleBytesAsExponentBits) {
  const ScaleByteRule rule = engine_profile(EngineId::kVllm).scale_byte_rule;
  for (uint32_t e = 0; e < 256; ++e)
    EXPECT_EQ(std::bit_cast<uint32_t>(ue8m0_to_float(static_cast<uint8_t>(e), rule)), e << 23)
        << kVllmTest << "::_reference, scale byte " << e;
}

// test_engram_dp_shared_memory_runtime_requirements: (cpu_offload False,
// dp 4) "requires cpu_offload=True"; (True, 1) "effective Engram DP size is 1".
TEST(VllmConformance, TestEngramDpSharedMemoryRuntimeRequirements) {
  struct Case {
    bool cpu_offload;
    int dp;
    const char* error;
  };
  for (const Case& c : {Case{false, 4, "cpu_offload"}, Case{true, 1, "dp"}}) {
    Deployment d;
    d.hosts = {host("node0", 4)};
    d.hosts[0].tmpfs_bytes_total = 256ull << 30;
    d.layout.dp = c.dp;
    d.engine.profile = EngineId::kVllm;
    d.config.cpu_offload = c.cpu_offload;
    d.config.cpu_offload_given = true;
    d.config.dp_shared_memory = true;
    WarningSink quiet;
    const Result<PlanResult> p = plan_deployment(d, quiet);
    EXPECT_FALSE(p.is_ok()) << kVllmTest << "::test_engram_dp_shared_memory_runtime_requirements[" << c.cpu_offload
                            << "-" << c.dp << "]";
    if (!p.is_ok()) {
      EXPECT_THAT(p.status().message(), HasSubstr(c.error));
    }
  }
}

// SGLang (stored reading, docs/design.md section 10): its scale-byte test
// asserts 2**-127 for byte 0; EngramHasher.history holds n-1 ids per request
// slot; verify blocks are equal per request (issue 39173).
TEST(SglangConformance, StoredReadingCases) {
  const EngineProfile& sglang = engine_profile(EngineId::kSglang);
  EXPECT_EQ(ue8m0_to_float(0, sglang.scale_byte_rule), std::ldexp(1.0f, -127))
      << "sglang scale-byte test (stored reading): byte 0 is 2**-127";
  const ModelSpec model = model_preset("deepseek-v4.1-flash").value();
  const TableHasher hasher = TableHasher::create(model, 0).value();
  int max_order = 0;
  for (int o : model.tables[0].orders) max_order = std::max(max_order, o);
  EXPECT_EQ(hasher.history_length(), max_order - 1) << "sglang EngramHasher.history [req_slots + 1, n - 1] (PR 39666)";
  EXPECT_TRUE(sglang.equal_verify_blocks) << "sglang verify blocks equal per request (issue 39173)";
}

}  // namespace
}  // namespace engram
