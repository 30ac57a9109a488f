// device_head_sharded (vLLM's device layout) on the emulator: the heads cut
// in ceil(H/P) slices over the shard group, bitwise equal to the CPU rule
// through the runtime for tp in {1, 2, 4} (x dp 1 or 2: the group is TP x DP,
// vLLM's embedding_across_dp), heads that do not divide the group (7 heads
// over 2, 4 and 8 members: short and empty slices), DEAD ids, idle and
// uneven ranks, sequence parallelism; ids of other slices' buckets through
// the placement's own build; its memory figures in the plan; and the config
// field that forces it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/deployment_file/deployment_yaml.h"
#include "core/lookup/shard_layout.h"
#include "core/lookup/tp_heads.h"
#include "core/placements/device_head_sharded.h"
#include "core/plan/deployment_plan.h"
#include "core/base/splitmix64.h"
#include "harness/emulated_scenario.h"
#include "sim/world.h"
#include "harness/scenario.h"
#include "tests/lookup_test_support.h"
#include "tests/tp_matrix_emulator.h"

namespace engram {
namespace {

using ::testing::HasSubstr;

struct Case {
  int tp = 1;
  int dp = 1;
  bool sequence_parallel = false;
  int heads = 8;
  std::string name() const { return fmt::format("tp{}_dp{}{}_{}h", tp, dp, sequence_parallel ? "_sp" : "", heads); }
  std::string scenario_text() const {
    return fmt::format(
        "description: device_head_sharded {name}\n"
        "hosts:\n"
        "  - {{name: b300-0, gpus: {gpus}, gpu_model: B300}}\n"  // one B300 holds the V4.1 tables whole (tp1 dp1)
        "layout: {{tp: {tp}, dp: {dp}}}\n"
        "config: {{placement: device_head_sharded, sequence_parallel: {sp}}}\n"
        "seed: {seed}\n"
        "lookup: {{model: tiny-{heads}h, batches: {batches}}}\n"
        "expect:\n"
        "  placement: device_head_sharded\n"
        "  lookup_equal: true\n",
        fmt::arg("name", name()), fmt::arg("gpus", tp * dp), fmt::arg("tp", tp), fmt::arg("dp", dp),
        fmt::arg("sp", sequence_parallel ? "true" : "false"), fmt::arg("seed", 300 + tp * 10 + dp + heads),
        fmt::arg("heads", heads), fmt::arg("batches", testing::dp_matrix_batches(dp)));
  }
};

TEST(DeviceHeadSharded, EqualsTheCpuRuleThroughTheRuntimeForTp124) {
  int ran = 0;
  for (int tp : {1, 2, 4})
    for (int dp : {1, 2})
      for (bool sp : {false, true})
        for (int heads : {8, 7}) {
          if (sp && tp == 1) continue;  // sequence parallelism needs tp > 1
          const Case c{tp, dp, sp, heads};
          testing::expect_scenario_text_passes(c.name(), c.scenario_text());
          ++ran;
        }
  EXPECT_EQ(ran, 20);
}

// Ids of any row (other slices' buckets too), DEAD and out of the table,
// uneven and idle ranks, over groups of 1, 2 and 4 and 7 heads: the
// placement's own build and host lookup against the CPU rule.
TEST(DeviceHeadSharded, AnyIdOverUnevenGroupsEqualsTheCpuRule) {
  auto spec = make_model_spec("seven", 300, {1}, {2}, 7, RowFormat::kFp8E4M3Ue8m0, 64, 3);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  const TableSpec& table = spec->tables[0];
  for (int group : {1, 2, 4}) {
    const uint64_t seed = 40 + static_cast<uint64_t>(group);
    const auto bytes = testing::filled_table(table, seed);
    std::vector<std::vector<int64_t>> ids(static_cast<size_t>(group));
    uint64_t state = seed;
    for (int r = 0; r < group; ++r) {
      const int tokens = (r * 5 + 3) % 6;  // 3, 2, 1, 0: uneven, one idle at 4
      for (int i = 0; i < tokens * 7; ++i) {
        const uint64_t draw = splitmix64_next(state);
        ids[static_cast<size_t>(r)].push_back(draw % 7 == 0   ? kDeadId
                                              : draw % 7 == 1 ? table.row_count() + 1
                                                              : static_cast<int64_t>(draw % static_cast<uint64_t>(table.row_count())));
      }
    }
    const auto run = testing::run_placement(Placement::kDeviceHeadSharded, table, bytes, ids, 5, seed);
    for (size_t r = 0; r < ids.size(); ++r) {
      ASSERT_TRUE(run.statuses[r].is_ok()) << group << " " << r << ": " << run.statuses[r].to_string();
      EXPECT_EQ(testing::first_difference(run.output[r], testing::direct_lookup(table, bytes, ids[r])), -1)
          << "group " << group << " rank " << r;
    }
  }
}

// Sequence parallelism (tp > 1): each TP rank of a replica gets back its own
// token shard, ceil(tokens / tp) tokens zero-padded, through the
// placement's own exchange (each rank posts its shard's ids alone, the
// all-to-all brings it its shard's heads). Built on tp x dp emulated GPUs of
// one host, the whole world its shard group, each replica's TP ranks a TP
// group; every rank asks for its shard (sequence_parallel_shards = tp, an
// output of the shard's size), ids of any row (other slices' buckets too,
// DEAD, out of the table), and ragged steps: no tokens, fewer than tp,
// counts tp does not divide, replicas idle while others are not.
TEST(DeviceHeadSharded, SequenceParallelTradesEachTpRankItsOwnTokenShard) {
  const int steps[][2] = {{5, 0}, {0, 3}, {1, 7}, {0, 0}, {9, 2}, {4, 4}};  // tokens of replicas 0 and 1
  const int64_t slot = 9;
  int cases = 0;
  for (int tp : {2, 4})
    for (int dp : {1, 2})
      for (int heads : {8, 7}) {
        const std::string name = fmt::format("tp{}_dp{}_{}h", tp, dp, heads);
        auto spec = make_model_spec("sp", 300, {1}, {2}, heads, RowFormat::kFp8E4M3Ue8m0, 64, 3);
        ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
        const TableSpec& table = spec->tables[0];
        const uint64_t seed = 70 + static_cast<uint64_t>(tp * 10 + dp + heads);
        const auto bytes = testing::filled_table(table, seed);
        // ids[step][replica], the same on every TP rank of the replica.
        std::vector<std::vector<std::vector<int64_t>>> ids(std::size(steps));
        uint64_t state = seed;
        for (size_t k = 0; k < std::size(steps); ++k)
          for (int d = 0; d < dp; ++d) {
            std::vector<int64_t>& mine = ids[k].emplace_back();
            for (int i = 0; i < steps[k][d] * heads; ++i) {
              const uint64_t draw = splitmix64_next(state);
              mine.push_back(draw % 9 == 0   ? kDeadId
                             : draw % 9 == 1 ? table.row_count() + 1
                                             : static_cast<int64_t>(draw % static_cast<uint64_t>(table.row_count())));
            }
          }
        const size_t token_values = static_cast<size_t>(heads) * static_cast<size_t>(table.dim);
        std::vector<std::string> mismatches;
        ModelSpec model;
        model.tables = {table};
        sim::WorldSpec world_spec;
        world_spec.hosts = sim::plain_hosts("gpu-host-", 1, tp * dp, "H200");
        world_spec.seed = seed;
        auto world = sim::run_world(world_spec, [&](RankBackend& b) -> Status {
          const int me = b.world_rank, tp_rank = me % tp, replica = me / tp;
          ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<Collectives> tp_group, b.world->split(replica, tp_rank));
          PlacementContext context{.backend = b, .group = *b.world, .tp_group = *tp_group, .host_group = *b.world,
                                   .host_writer_world_rank = 0, .model = model, .fill_seed = seed, .job_id = "test"};
          context.tokens_per_rank_max = slot;
          ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<PlacementTables> tables,
                                  placement_ops(Placement::kDeviceHeadSharded).build(context));
          Status first;
          for (size_t k = 0; k < std::size(steps); ++k) {
            const std::vector<int64_t>& replica_ids = ids[k][static_cast<size_t>(replica)];
            const size_t tokens = replica_ids.size() / static_cast<size_t>(heads);
            const size_t shard = (tokens + static_cast<size_t>(tp) - 1) / static_cast<size_t>(tp);
            std::vector<uint16_t> got(shard * token_values, testing::kUnwritten);
            LookupRequest request{&table, replica_ids, slot, got};
            request.sequence_parallel_shards = tp;
            const Status looked = tables->lookup(0, request);
            if (!looked.is_ok()) {
              if (first.is_ok()) first = looked;
              continue;
            }
            const std::vector<uint16_t> every_token = testing::direct_lookup(table, bytes, replica_ids);
            std::vector<uint16_t> want(got.size(), 0);
            const size_t begin = static_cast<size_t>(tp_rank) * shard;
            for (size_t t = 0; t < shard && begin + t < tokens; ++t)
              std::copy_n(every_token.begin() + static_cast<std::ptrdiff_t>((begin + t) * token_values), token_values,
                          want.begin() + static_cast<std::ptrdiff_t>(t * token_values));
            const int64_t at = testing::first_difference(want, got);
            if (at >= 0)
              mismatches.push_back(fmt::format("{} step {} rank {} (tp rank {}, {} tokens): value {}", name, k, me,
                                               tp_rank, tokens, at));
          }
          Status released = tables->release();
          return first.is_ok() ? released : first;
        });
        ASSERT_TRUE(world.is_ok()) << name << ": " << world.status().to_string();
        for (size_t r = 0; r < world->statuses.size(); ++r)
          EXPECT_TRUE(world->statuses[r].is_ok()) << name << " rank " << r << ": " << world->statuses[r].to_string();
        EXPECT_TRUE(mismatches.empty()) << mismatches.front();
        ++cases;
      }
  EXPECT_EQ(cases, 8);
}

// The runtime's device lookup takes sequence parallelism for it (and only
// for it): other device placements' device lookups write every token.
TEST(DeviceHeadSharded, ATokenShardIsRefusedByALookupThatWritesEveryToken) {
  auto spec = make_model_spec("sp", 300, {1}, {2}, 4, RowFormat::kFp8E4M3Ue8m0, 64, 3);
  ASSERT_TRUE(spec.is_ok());
  DeviceLookupRequest r;
  r.table = &spec->tables[0];
  r.tokens_per_rank_max = 4;
  r.sequence_parallel_shards = 2;
  const Status every = check_device_request(r, 3);
  EXPECT_EQ(every.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(every.message(), HasSubstr("sequence_parallel_shards 2 asks for a TP rank's token shard"));
  EXPECT_TRUE(check_token_shard_request(r, 3, 2).is_ok());
  EXPECT_THAT(check_token_shard_request(r, 3, 4).message(), HasSubstr("use 1 (off) or the TP size 4"));
  EXPECT_TRUE(placement_ops(Placement::kDeviceHeadSharded).trades_token_shards);
  for (Placement p : {Placement::kDeviceCollective, Placement::kDevicePeer})
    EXPECT_FALSE(placement_ops(p).trades_token_shards) << placement_name(p);
}

Deployment v41_on_one_host(int tp, int dp) {
  auto d = parse_deployment_text(fmt::format("hosts: [{{name: h, gpus: {}, gpu_model: H200}}]\n"
                                             "layout: {{tp: {}, dp: {}}}\n"
                                             "config: {{placement: device_head_sharded}}\n",
                                             tp * dp, tp, dp),
                                 "test");
  EXPECT_TRUE(d.is_ok()) << d.status().to_string();
  return *d;
}

TEST(DeviceHeadSharded, PlanHoldsEachRanksHeadSlicesInHbm) {
  auto model = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(model.is_ok());
  uint64_t tables = 0;
  for (const TableSpec& t : model->tables) tables += t.table_bytes();
  // 24 heads over 8 (3 per GPU), and over 5 (5, 5, 5, 5 and a short 4).
  for (auto [tp, dp] : {std::pair{2, 4}, std::pair{5, 1}}) {
    const int members = tp * dp;
    const Deployment d = v41_on_one_host(tp, dp);
    WarningSink quiet;
    auto plan = plan_deployment(d, quiet);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    uint64_t rows_bytes_total = 0;
    for (const RankPlan& rp : plan->ranks) {
      EXPECT_EQ(rp.placement, Placement::kDeviceHeadSharded);
      EXPECT_EQ(rp.shard_group_size, members);
      uint64_t want = 0;
      for (const TableSpec& t : model->tables) {
        const HeadRange heads = head_shard(t.head_count(), members, rp.shard_index);
        EXPECT_EQ(heads.size(), members == 8 ? 3 : rp.shard_index == 4 ? 4 : 5);
        const RowRange rows = rows_of_heads(t, heads);
        rows_bytes_total += static_cast<uint64_t>(rows.row_count) * t.row_bytes();
        want += (static_cast<uint64_t>(rows.row_count) * t.row_bytes() + (2u << 20) - 1) / (2u << 20) * (2u << 20);
      }
      EXPECT_EQ(rp.memory.hbm_table_bytes, want) << "rank " << rp.rank;
      EXPECT_EQ(rp.memory.hbm_buffer_bytes,
                device_head_sharded_buffer_bytes(*model, members, d.config.tokens_per_rank_max, tp));
    }
    // The slices together are the tables, once.
    EXPECT_EQ(rows_bytes_total, tables);
    // About 1/members of 188.8 GiB per GPU.
    EXPECT_NEAR(static_cast<double>(plan->ranks[0].memory.hbm_table_bytes) / (1ull << 30),
                188.83 * (members == 8 ? 3.0 / 24 : 5.0 / 24), 0.2);
    if (members == 5) {
      EXPECT_LT(plan->ranks[4].memory.hbm_table_bytes, plan->ranks[0].memory.hbm_table_bytes);
    }
  }
}

TEST(DeviceHeadSharded, ShortAndEmptySlicesCostWhatTheyHold) {
  auto model = model_preset("tiny-7h");
  ASSERT_TRUE(model.is_ok());
  // 7 heads over 8 members: slices of 1, the last empty (one granule for its allocation).
  const uint64_t granule = 2u << 20;
  EXPECT_EQ(device_head_shard_hbm_bytes(*model, 8, 7, granule), granule * model->tables.size());
  // Over 2: [0, 4) and [4, 7): the second holds fewer rows.
  EXPECT_GE(device_head_shard_hbm_bytes(*model, 2, 0, 1), device_head_shard_hbm_bytes(*model, 2, 1, 1));
  EXPECT_EQ(device_head_shard_hbm_bytes(*model, 2, 0, 1) + device_head_shard_hbm_bytes(*model, 2, 1, 1),
            [&] {
              uint64_t total = 0;
              for (const TableSpec& t : model->tables) total += t.table_bytes();
              return total;
            }());
}

TEST(DeviceHeadSharded, ConfigPlacementIsValidatedNamingTheFieldAndTheChoices) {
  auto bad = parse_deployment_text("hosts: [{name: h, gpus: 2}]\nlayout: {tp: 2}\nconfig: {placement: device_heads}\n",
                                   "bad.yaml");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("config.placement"));
  EXPECT_THAT(bad.status().message(), HasSubstr("'device_heads'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("device_head_sharded"));
  // Set in code, the plan refuses it the same way.
  Deployment d = v41_on_one_host(2, 1);
  d.config.placement = "nope";
  WarningSink quiet;
  auto plan = plan_deployment(d, quiet);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("config.placement: unknown placement 'nope'"));
  // Without it the rules decide as before.
  d.config.placement.clear();
  auto ruled = plan_deployment(d, quiet);
  ASSERT_TRUE(ruled.is_ok()) << ruled.status().to_string();
  EXPECT_EQ(ruled->ranks[0].placement, Placement::kDeviceCollective);
}

}  // namespace
}  // namespace engram
