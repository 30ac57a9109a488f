// The engine profiles against the engines' newest Engram code (engramlab
// issue 47, "Where it stands", points 1-12): each test pins one rule as the
// engine's code has it, with the source the profile cites next to the rule,
// and fails on the rule engramlab applied before. Plus: every rule of every
// profile and variant has a source, and variants are named, never mixed in.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/backend/collectives.h"
#include "core/engines/engine_profile.h"
#include "core/engines/engine_profiles.h"
#include "core/lookup/lookup_rows.h"
#include "core/model/request_hasher.h"
#include "core/model/row_format.h"
#include "core/plan/deployment_plan.h"
#include "core/plan/step_time_plan.h"
#include "core/report/engine_comparison.h"
#include "kernels/gather_reference.h"
#include "tests/engine_test_support.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

HostSpec host(std::string name, int gpus, uint64_t tmpfs_bytes = 64ull << 20) {
  return testing::gb200_host(std::move(name), gpus, tmpfs_bytes);
}

Deployment one_node(int tp, int dp, EngineId engine, std::string variant = "") {
  Deployment d;
  d.hosts = {host("node0", tp * dp)};
  d.layout.tp = tp;
  d.layout.dp = dp;
  d.engine.profile = engine;
  d.engine.variant = std::move(variant);
  return d;
}

// DEP8 over two nodes of four GPUs (tp 1 x dp 8), host RAM enough for a
// table per node.
Deployment two_nodes_dep8(EngineId engine) {
  Deployment d;
  d.hosts = {host("node0", 4, 512ull << 30), host("node1", 4, 512ull << 30)};
  d.layout.tp = 1;
  d.layout.dp = 8;
  d.engine.profile = engine;
  return d;
}

Result<PlanResult> plan(const Deployment& d) {
  WarningSink quiet;
  return plan_deployment(d, quiet);
}

// The profiles a user can name: each engine's main and every variant.
std::vector<const EngineProfile*> every_profile() {
  std::vector<const EngineProfile*> out;
  for (const EngineProfile& main : engine_registry()) {
    out.push_back(&main);
    for (const EngineVariant& v : main.variants) out.push_back(&engine_profile(main.id, v.name));
  }
  return out;
}

TEST(EngineRules, EveryRuleOfEveryProfileAndVariantHasASource) {
  const char* keys[] = {rule_key::kCpuOffloadDefault, rule_key::kDeviceTpSplit,     rule_key::kHostTpSplit,
                        rule_key::kNodeLocalGroup,    rule_key::kHostLayouts,       rule_key::kDevicePlacement,
                        rule_key::kHostPlacement,     rule_key::kRowsBack,          rule_key::kSequenceParallel,
                        rule_key::kMinusZero,         rule_key::kScaleBytes,        rule_key::kShmAtCreation,
                        rule_key::kVerifyBlocks,      rule_key::kContextParallel,   rule_key::kPadding,
                        rule_key::kFallbackWarnings,  rule_key::kRefusals,          rule_key::kExtraMemory};
  for (const EngineProfile* p : every_profile()) {
    SCOPED_TRACE(profile_label(*p));
    EXPECT_STRNE(p->version.ref, "");
    ASSERT_FALSE(p->rules.empty());
    for (const EngineRule& r : p->rules) {
      EXPECT_TRUE(rule_source_complete(r.source)) << r.key << ": " << rule_source_text(r.source);
      EXPECT_STRNE(r.text, "") << r.key;
    }
    // plan --explain may name any of these keys: every profile has each.
    for (const char* k : keys) EXPECT_NE(find_rule(*p, k), nullptr) << k;
    if (p->variant != nullptr) {
      EXPECT_TRUE(rule_source_complete(p->variant->source));
    }
    for (const EngineHolding& h : p->holdings) EXPECT_TRUE(rule_source_complete(h.source)) << h.what;
  }
  // Unmerged work lives only in variants: a main profile cites no open PR or fork.
  for (const EngineProfile& main : engine_registry())
    for (const EngineRule& r : main.rules)
      if (r.key != std::string_view(rule_key::kVerifyBlocks) && r.key != std::string_view(rule_key::kExtraMemory)) {
        EXPECT_TRUE(r.source.state != SourceState::kOpen && r.source.state != SourceState::kFork)
            << main.name << " " << r.key << ": " << rule_source_text(r.source);
      }
}

TEST(EngineRules, AVariantReplacesMainsRuleOfTheSameKeyAndSaysSo) {
  const EngineProfile& v = engine_profile(EngineId::kVllm, "sp-all-to-all");
  EXPECT_EQ(profile_label(v), "vllm+sp-all-to-all");
  EXPECT_EQ(std::string_view(rule_of(v, rule_key::kRowsBack).source.ref), "PR 56435");
  EXPECT_EQ(rule_of(v, rule_key::kRowsBack).source.state, SourceState::kOpen);
  EXPECT_EQ(rule_of(engine_profile(EngineId::kVllm), rule_key::kRowsBack).source.state, SourceState::kMerged);
  EXPECT_EQ(v.rules.size(), engine_profile(EngineId::kVllm).rules.size());
}

// Bad input: an unknown variant, a variant of the wrong engine: named with
// the engine, the variant and the variants that exist.
TEST(EngineRules, UnknownOrForeignVariantsAreNamedWithTheOnesThatExist) {
  const Result<EngineChoice> unknown = parse_engine_choice("vllm+sp-alltoall", "--engine");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(),
              AllOf(HasSubstr("'sp-alltoall' is not a variant of engine vllm"),
                    HasSubstr("vllm+sp-all-to-all, vllm+replica-copy"), HasSubstr("did you mean 'sp-all-to-all'?")));
  const Result<EngineChoice> foreign = parse_engine_choice("vllm+numa-shared", "--engine");
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_THAT(foreign.status().message(), AllOf(HasSubstr("it is a variant of another engine: sglang+numa-shared"),
                                                HasSubstr("engine vllm's variants: vllm+sp-all-to-all")));
  const Result<EngineChoice> ok = parse_engine_choice("sglang+numa-shared", "--engine");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->id, EngineId::kSglang);
  EXPECT_EQ(ok->variant, "numa-shared");
  EXPECT_THAT(parse_engine_choice("engramlab+x", "--engine").status().message(), HasSubstr("engine engramlab has no variants"));
}

// Point 1. vLLM brings rows back by an all-gather over its Engram DP group,
// each rank keeping its own tokens (_gather_engram_rows,
// vllm/models/deepseek_v4_1/nvidia/engram.py): the group size times the
// all-to-all's bytes, which is open PR 56435 (vllm+sp-all-to-all).
TEST(EngineRules, Point1VllmAllGathersRowsAtTheGroupSize) {
  Deployment d = one_node(2, 4, EngineId::kEngramlab);
  d.config.cpu_offload = true;
  d.config.cpu_offload_given = true;
  d.config.dp_shared_memory = false;  // nothing shared: DP head shards over the Engram DP group of 4
  const EngineChoice engines[] = {{EngineId::kVllm, ""}, {EngineId::kVllm, "sp-all-to-all"}};
  const std::vector<EngineColumn> cols = compare_engines(d, engines);
  ASSERT_TRUE(cols[0].status.is_ok()) << cols[0].status.to_string();
  ASSERT_TRUE(cols[1].status.is_ok()) << cols[1].status.to_string();
  EXPECT_EQ(cols[0].placement, "host_head_sharded");
  ASSERT_EQ(cols[0].collectives.size(), 3u);
  EXPECT_EQ(cols[0].collectives[1].name, "all-gather rows, each rank keeping its own tokens");
  EXPECT_EQ(cols[0].collectives[1].group, "node-local DP group of 4");
  EXPECT_EQ(cols[1].collectives[1].name, "all-to-all rows back");
  EXPECT_EQ(cols[0].collectives[1].bytes_per_token, 4 * cols[1].collectives[1].bytes_per_token);
  // 48 heads over TP 2 (24 per rank), 256 values of 2 bytes, four times.
  EXPECT_EQ(cols[0].collectives[1].bytes_per_token, 4u * 24 * 256 * 2);
  EXPECT_EQ(cols[1].label, "vllm+sp-all-to-all");
}

// Point 1, under sequence parallelism: an all-gather over TP, each rank
// keeping its slice (no fewer bytes); the all-to-all is the variant's.
TEST(EngineRules, Point1VllmSequenceParallelAllGathersOverTp) {
  Deployment d = one_node(2, 4, EngineId::kEngramlab);
  d.config.cpu_offload_given = true;
  d.config.sequence_parallel = true;
  const EngineChoice engines[] = {{EngineId::kVllm, ""}, {EngineId::kVllm, "sp-all-to-all"}};
  const std::vector<EngineColumn> cols = compare_engines(d, engines);
  ASSERT_TRUE(cols[0].status.is_ok()) << cols[0].status.to_string();
  EXPECT_EQ(cols[0].collectives.back().name, "all-gather over TP, each rank keeping its token slice");
  EXPECT_THAT(cols[1].collectives.back().name, HasSubstr("of each TP rank's token shard"));
  EXPECT_GT(cols[0].collective_bytes_per_token, cols[1].collective_bytes_per_token);
}

// SGLang's per_rank layout cuts host rows over its row-shard group (every
// TP rank; under DP attention all of them) and sums them back over that
// group: the comparison names both collectives at the group's size, and the
// step model prices the sum over it (it read the node-local group before,
// one rank, and priced no collective at all).
TEST(EngineRules, SglangPerRankRowShardsAreSummedOverTheirGroup) {
  Deployment d = two_nodes_dep8(EngineId::kSglang);
  d.config.cpu_offload = true;
  d.config.cpu_offload_given = true;
  d.config.host_layout = "per_rank";
  const EngineChoice engines[] = {{EngineId::kSglang, ""}};
  const std::vector<EngineColumn> cols = compare_engines(d, engines);
  ASSERT_TRUE(cols[0].status.is_ok()) << cols[0].status.to_string();
  ASSERT_EQ(cols[0].placement, "sglang_private");
  ASSERT_EQ(cols[0].collectives.size(), 2u);
  EXPECT_EQ(cols[0].collectives[0].name, "all-gather ids");
  EXPECT_EQ(cols[0].collectives[1].name, "reduce-scatter rows (sum)");
  EXPECT_EQ(cols[0].collectives[0].group, "row shards of 8");
  EXPECT_EQ(cols[0].collectives[1].group, "row shards of 8");
  const auto planned = plan(d);
  ASSERT_TRUE(planned.is_ok()) << planned.status().to_string();
  const int heads = planned->model.heads_per_table.front() * static_cast<int>(planned->model.heads_per_table.size());
  EXPECT_EQ(cols[0].collectives[0].bytes_per_token, 8u * static_cast<uint64_t>(heads));
  for (const RankPlan& rp : planned->ranks) {
    ASSERT_EQ(rp.shard_group_size, 8);
    EXPECT_EQ(step_input_of(*planned, rp, 1024).group_size, 8) << "rank " << rp.rank;
  }
  // The other side: a host placement of the node-local group keeps its group.
  Deployment shared = two_nodes_dep8(EngineId::kVllm);
  const auto vllm = plan(shared);
  ASSERT_TRUE(vllm.is_ok()) << vllm.status().to_string();
  for (const RankPlan& rp : vllm->ranks)
    EXPECT_EQ(step_input_of(*vllm, rp, 1024).group_size, std::max(rp.node_local_group_size, 1)) << "rank " << rp.rank;
}

// A one-table model whose row 0 holds -0 in every value (FP8 0x80 under
// scale 1), row 1 a plain value.
TableSpec minus_zero_table(MinusZeroRule rule) {
  TableSpec t;
  t.layer_id = 1;
  t.orders = {2};
  t.heads_per_order = 1;
  t.primes = {2};
  t.dim = 64;
  t.minus_zero = rule;
  return t;
}
std::vector<std::byte> minus_zero_rows(const TableSpec& t) {
  std::vector<std::byte> rows(t.table_bytes(), std::byte{0});
  for (int i = 0; i < t.dim; ++i) {
    rows[static_cast<size_t>(i)] = std::byte{0x80};                                // -0
    rows[t.row_bytes() + static_cast<size_t>(i)] = std::byte{0x38};                // 1.0
  }
  for (int b = 0; b < t.dim / kScaleBlock; ++b) {
    rows[static_cast<size_t>(t.dim + b)] = std::byte{127};
    rows[t.row_bytes() + static_cast<size_t>(t.dim + b)] = std::byte{127};
  }
  return rows;
}

// Point 2. vLLM gathers and never sums: -0 stays 0x8000 on every path that
// reads a row (the whole table, a row range, a head shard, the kernels'
// reference). SGLang keeps it at tp 1 and on its shared host table and loses
// it where its all-reduce adds +0. engramlab writes +0 everywhere.
TEST(EngineRules, Point2MinusZeroPerEngine) {
  EXPECT_EQ(engine_profile(EngineId::kVllm).minus_zero, MinusZeroRule::kKeep);
  EXPECT_EQ(engine_profile(EngineId::kSglang).minus_zero, MinusZeroRule::kKeepUnlessSummed);
  EXPECT_EQ(engine_profile(EngineId::kEngramlab).minus_zero, MinusZeroRule::kWritePlusZero);
  // Per path: vLLM keeps -0 even where engramlab's collective combines rows,
  // SGLang only where nothing sums them.
  for (bool summed : {false, true}) {
    EXPECT_EQ(lookup_minus_zero(engine_profile(EngineId::kVllm), summed), MinusZeroRule::kKeep);
    EXPECT_EQ(lookup_minus_zero(engine_profile(EngineId::kEngramlab), summed), MinusZeroRule::kWritePlusZero);
  }
  EXPECT_EQ(lookup_minus_zero(engine_profile(EngineId::kSglang), false), MinusZeroRule::kKeep);
  EXPECT_EQ(lookup_minus_zero(engine_profile(EngineId::kSglang), true), MinusZeroRule::kWritePlusZero);
  ModelSpec model;
  model.tables = {minus_zero_table(MinusZeroRule::kWritePlusZero)};
  apply_engine_value_rules(engine_profile(EngineId::kVllm), true, model);
  EXPECT_EQ(model.tables[0].minus_zero, MinusZeroRule::kKeep);
  apply_engine_value_rules(engine_profile(EngineId::kSglang), true, model);
  EXPECT_EQ(model.tables[0].minus_zero, MinusZeroRule::kWritePlusZero);

  for (MinusZeroRule rule : {MinusZeroRule::kKeep, MinusZeroRule::kWritePlusZero}) {
    SCOPED_TRACE(std::string(minus_zero_rule_name(rule)));
    const TableSpec t = minus_zero_table(rule);
    const std::vector<std::byte> rows = minus_zero_rows(t);
    const uint16_t want = rule == MinusZeroRule::kKeep ? 0x8000 : 0x0000;
    const std::vector<int64_t> ids = {0};
    std::vector<uint16_t> whole(64), range(64), shard(64), reference(64);
    lookup_rows_whole_table(t, rows, ids, whole);  // host_shared, host_private, sglang_shared
    lookup_rows_in_range(t, 0, t.row_count(), rows, ids, range);
    lookup_rows_head_shard(t, HeadRange{0, 1}, 0, rows, ids, shard);  // host_head_sharded
    kernels::row_reference(t, std::span(rows).subspan(0, t.row_bytes()), reference);  // the emulator's device path
    for (const auto* out : {&whole, &range, &shard, &reference})
      EXPECT_TRUE(std::all_of(out->begin(), out->end(), [&](uint16_t v) { return v == want; }));
  }
  // SGLang's all-reduce at tp 2: the owner's -0 plus the other rank's +0 is
  // +0; at tp 1 there is nothing to add and -0 stays.
  const std::vector<uint16_t> owner = {0x8000, 0x8000}, other = {0x0000, 0x0000};
  std::vector<uint16_t> summed(1);
  const std::span<const uint16_t> two[] = {owner, other};
  reduce_scatter_sum_bf16_reference(two, 0, summed);
  EXPECT_EQ(summed[0], 0x0000);
  std::vector<uint16_t> alone(2);
  const std::span<const uint16_t> one[] = {owner};
  reduce_scatter_sum_bf16_reference(one, 0, alone);
  EXPECT_EQ(alone[0], 0x8000);
}

// Point 3. SGLang's CUDA engram_gather decodes scale byte 255 to +inf (the
// exponent bits), as vLLM does; NaN comes only from its torch fallback.
TEST(EngineRules, Point3SglangScaleByte255IsInfinityInItsCudaKernel) {
  const EngineProfile& sglang = engine_profile(EngineId::kSglang);
  EXPECT_EQ(std::bit_cast<uint32_t>(ue8m0_to_float(255, sglang.scale_byte_rule)), 0x7f800000u);
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x38, 255, sglang.scale_byte_rule), 0x7f80);  // 1.0 x +inf
  EXPECT_EQ(scale_bytes_text(sglang), "0 -> 2^-127, 255 -> +inf");
  const EngineProfile& fallback = engine_profile(EngineId::kSglang, "torch-fallback");
  EXPECT_TRUE(std::isnan(ue8m0_to_float(255, fallback.scale_byte_rule)));
  EXPECT_EQ(scale_bytes_text(fallback), "0 -> 2^-127, 255 -> NaN");
  EXPECT_THAT(rule_of(sglang, rule_key::kScaleBytes).text, HasSubstr("NaN only in the torch fallback"));
}

// Point 4. vLLM decides the fallback on the /dev/shm total, then its first
// Engram DP rank checks free space per file and aborts startup.
TEST(EngineRules, Point4VllmAbortsWhereDevShmHasTooLittleFree) {
  Deployment d = one_node(1, 8, EngineId::kVllm);
  d.hosts[0].tmpfs_bytes_total = 256ull << 30;  // the total holds the tables' 188.8 GiB
  d.hosts[0].tmpfs_bytes_used = 128ull << 30;   // but only 128 GiB are free
  d.config.cpu_offload = true;
  d.config.cpu_offload_given = true;
  const Result<PlanResult> vllm = plan(d);
  ASSERT_FALSE(vllm.is_ok());
  EXPECT_EQ(vllm.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(vllm.status().message(),
              AllOf(HasSubstr("engine vllm aborts startup"), HasSubstr("Insufficient space in /dev/shm:"),
                    HasSubstr("MiB required,"), HasSubstr("MiB free"), HasSubstr("host 'node0'")));
  d.engine.profile = EngineId::kEngramlab;  // its rule: the total decides, host_shared
  const Result<PlanResult> ours = plan(d);
  ASSERT_TRUE(ours.is_ok()) << ours.status().to_string();
  EXPECT_EQ(ours->ranks[0].placement, Placement::kHostShared);
  d.engine.profile = EngineId::kVllm;
  d.hosts[0].tmpfs_bytes_used = 0;
  const Result<PlanResult> room = plan(d);
  ASSERT_TRUE(room.is_ok()) << room.status().to_string();
  EXPECT_EQ(room->ranks[0].placement, Placement::kHostShared);
}

// Point 5. vLLM's replica is TP x PP x prefill CP: TP2 x PCP2 x DP2 on one
// 8-GPU node is two replicas of 4 ranks, a group of 2 (engramlab's host map
// gives 4); under elastic EP vLLM builds no Engram DP group at all.
TEST(EngineRules, Point5VllmReplicaIsTpTimesPrefillCpAndElasticEpHasNoGroup) {
  Deployment d = one_node(2, 4, EngineId::kVllm);  // engramlab's dp counts CP ranks: 2 x 2
  d.layout.prefill_cp = 2;
  d.config.cpu_offload = true;
  d.config.cpu_offload_given = true;
  d.config.dp_shared_memory = false;
  const Result<PlanResult> vllm = plan(d);
  ASSERT_TRUE(vllm.is_ok()) << vllm.status().to_string();
  EXPECT_EQ(vllm_engram_dp_size(vllm->deployment), 2);
  EXPECT_EQ(vllm->ranks[0].node_local_group_size, 2);
  // Replica 0 is ranks 0-3 (TP x CP), replica 1 ranks 4-7: rank 0 and rank 4 share a group.
  EXPECT_EQ(vllm->ranks[0].node_local_group, vllm->ranks[4].node_local_group);
  EXPECT_NE(vllm->ranks[0].node_local_group, vllm->ranks[2].node_local_group);
  d.engine.profile = EngineId::kEngramlab;
  const Result<PlanResult> ours = plan(d);
  ASSERT_TRUE(ours.is_ok()) << ours.status().to_string();
  EXPECT_EQ(ours->ranks[0].node_local_group_size, 4);

  Deployment elastic = one_node(2, 4, EngineId::kVllm);
  elastic.layout.elastic_ep = true;
  elastic.config.cpu_offload = false;
  elastic.config.cpu_offload_given = true;
  EXPECT_EQ(vllm_engram_dp_size(elastic), 1);
  const Result<PlanResult> device = plan(elastic);
  ASSERT_TRUE(device.is_ok()) << device.status().to_string();
  EXPECT_EQ(device->ranks[0].node_local_group_size, 1);
  EXPECT_EQ(device->ranks[0].shard_group_size, 2);  // heads over TP alone, no Engram DP group
}

// Point 6. SGLang's host layouts as upstream names them: `shared` (the
// default) and `per_rank`; numa_shared (open PR 40106), file (forks) and
// the older auto are variants; its host TP split is by rows.
TEST(EngineRules, Point6SglangHostLayoutsAsUpstreamNamesThem) {
  const EngineProfile& sglang = engine_profile(EngineId::kSglang);
  ASSERT_EQ(sglang.host_layouts.size(), 2u);
  EXPECT_STREQ(sglang.host_layouts[0].name, "shared");
  EXPECT_STREQ(sglang.host_layouts[1].name, "per_rank");
  EXPECT_EQ(sglang.host_tp_split, TpSplit::kRows);
  Deployment d = one_node(2, 2, EngineId::kSglang);
  d.config.cpu_offload = true;
  d.config.cpu_offload_given = true;
  const Result<PlanResult> shared = plan(d);
  ASSERT_TRUE(shared.is_ok()) << shared.status().to_string();
  EXPECT_EQ(shared->ranks[0].placement, Placement::kSglangShared);
  d.config.host_layout = "per_rank";
  const Result<PlanResult> per_rank = plan(d);
  ASSERT_TRUE(per_rank.is_ok()) << per_rank.status().to_string();
  EXPECT_EQ(per_rank->ranks[0].placement, Placement::kSglangPrivate);
  d.config.host_layout = "numa_shared";
  const Result<PlanResult> numa = plan(d);
  ASSERT_FALSE(numa.is_ok());
  EXPECT_EQ(numa.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(numa.status().message(), AllOf(HasSubstr("engine sglang has no host layout 'numa_shared'"),
                                             HasSubstr("it offers shared, per_rank"), HasSubstr("sglang+numa-shared")));
  d.engine.variant = "numa-shared";
  const Result<PlanResult> variant = plan(d);
  ASSERT_TRUE(variant.is_ok()) << variant.status().to_string();
  EXPECT_EQ(variant->ranks[0].placement, Placement::kSglangNumaShared);
  d.config.host_layout = "file";  // a setting this variant does not have
  const Result<PlanResult> file = plan(d);
  ASSERT_FALSE(file.is_ok());
  EXPECT_THAT(file.status().message(),
              AllOf(HasSubstr("engine sglang+numa-shared has no host layout 'file'"), HasSubstr("sglang+file")));
  d.engine.variant = "older-layouts";
  d.config.host_layout = "auto";
  EXPECT_TRUE(plan(d).is_ok());
}

// Point 7. SGLang asserts equal verify blocks per request (issue 39173 is
// open): a ragged verify is refused under its profile, taken under vLLM's.
TEST(EngineRules, Point7SglangRefusesRaggedVerifyBlocks) {
  const ModelSpec model = model_preset("tiny").value();
  for (EngineId id : {EngineId::kSglang, EngineId::kVllm}) {
    SCOPED_TRACE(engine_name(id));
    Result<RequestHasher> hasher = RequestHasher::create(TableHasher::create(model, 0).value(), 2);
    ASSERT_TRUE(hasher.is_ok()) << hasher.status().to_string();
    apply_engine_hash_rules(engine_profile(id), *hasher);
    ASSERT_TRUE(hasher->begin(0).is_ok());
    ASSERT_TRUE(hasher->begin(1).is_ok());
    const std::vector<int64_t> tokens = {1, 2, 3, 4, 5};
    const RequestRun runs[] = {{0, 0, 3}, {1, 3, 2}};  // blocks of 3 and 2 tokens
    std::vector<int64_t> ids(tokens.size() * static_cast<size_t>(hasher->table_hasher().head_count()));
    const Status s = hasher->verify(tokens, runs, ids);
    if (id == EngineId::kSglang) {
      ASSERT_FALSE(s.is_ok());
      EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(s.message(), AllOf(HasSubstr("runs[1].token_count is 2, the batch's first request's is 3"),
                                     HasSubstr("engine sglang asserts equal verify blocks"), HasSubstr("issue 39173")));
    } else {
      EXPECT_TRUE(s.is_ok()) << s.to_string();
    }
  }
}

// Point 8. SGLang's prefill CP hashes the whole prompt on every CP rank and
// all-gathers hash ids; engramlab's halo (shard + n-1 tokens) is its own.
TEST(EngineRules, Point8SglangCpHashesTheWholePromptOnEveryRank) {
  EXPECT_EQ(cp_tokens_hashed_per_rank(engine_profile(EngineId::kSglang), 8192, 4, 4), 8192);
  EXPECT_EQ(cp_tokens_hashed_per_rank(engine_profile(EngineId::kEngramlab), 8192, 4, 4), 2048 + 3);
  EXPECT_THAT(rule_of(engine_profile(EngineId::kSglang), rule_key::kContextParallel).text,
              AllOf(HasSubstr("whole prompt"), HasSubstr("all-gathered"), HasSubstr("no token halo")));
  Deployment d = one_node(1, 4, EngineId::kSglang);
  d.layout.prefill_cp = 2;
  const Result<PlanResult> p = plan(d);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_TRUE(std::any_of(p->decided_by.begin(), p->decided_by.end(), [](const DecidedBy& e) {
    return e.rule_key == rule_key::kContextParallel && e.engine == "sglang";
  }));
}

// Point 9. Only vLLM's DP-slot padding hashes to DEAD; SGLang's graph
// padding reads all-pad rows and its DP-attention padding reads row 0.
TEST(EngineRules, Point9PaddingRowsReadPerStep) {
  EXPECT_EQ(padding_rows_read(engine_profile(EngineId::kVllm), 6, 3, 24), 0);
  EXPECT_EQ(padding_rows_read(engine_profile(EngineId::kEngramlab), 6, 3, 24), 0);
  EXPECT_EQ(padding_rows_read(engine_profile(EngineId::kSglang), 6, 3, 24), (6 + 3) * 24);
}

// Point 10. Of vLLM's fallback warnings only the /dev/shm-size one names
// --shm-size / --ipc=host; the others say "per rank".
TEST(EngineRules, Point10WarningsAsVllmWordsThem) {
  // Two hosts of 2 GPUs, TP2 x DP2: one replica per node, a group of 1.
  Deployment apart;
  apart.hosts = {host("a", 2, 256ull << 30), host("b", 2, 256ull << 30)};
  apart.layout.tp = 2;
  apart.layout.dp = 2;
  apart.engine.profile = EngineId::kVllm;
  const Result<PlanResult> p = plan(apart);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_FALSE(p->warnings.empty());
  EXPECT_EQ(p->warnings[0].key, "dp_shared_memory.fallback.group_size_1");
  EXPECT_THAT(p->warnings[0].text, AllOf(HasSubstr("per rank"), Not(HasSubstr("--shm-size")), Not(HasSubstr("--ipc"))));
  const Result<PlanResult> small = plan(one_node(1, 4, EngineId::kVllm));  // 64 MiB /dev/shm
  ASSERT_TRUE(small.is_ok()) << small.status().to_string();
  ASSERT_FALSE(small->warnings.empty());
  EXPECT_THAT(small->warnings[0].text, AllOf(HasSubstr("--shm-size or --ipc=host"), HasSubstr("per rank")));
  apart.engine.profile = EngineId::kEngramlab;
  apart.config.cpu_offload = true;
  const Result<PlanResult> ours = plan(apart);
  ASSERT_TRUE(ours.is_ok()) << ours.status().to_string();
  EXPECT_THAT(ours->warnings[0].text, Not(HasSubstr("per rank")));
}

// Point 11. vLLM's main shards heads over the Engram DP group when nothing
// is shared (its code and tests); the docs' reading, one TP-sharded copy per
// replica, is the variant vllm+replica-copy.
TEST(EngineRules, Point11VllmDefaultWhenNothingIsShared) {
  Deployment d = one_node(1, 4, EngineId::kVllm);
  d.config.cpu_offload = true;
  d.config.cpu_offload_given = true;
  d.config.dp_shared_memory = false;
  const Result<PlanResult> main = plan(d);
  ASSERT_TRUE(main.is_ok()) << main.status().to_string();
  EXPECT_EQ(main->ranks[0].placement, Placement::kHostHeadSharded);
  EXPECT_EQ(main->ranks[0].node_local_group_size, 4);
  d.engine.variant = "replica-copy";
  const Result<PlanResult> copy = plan(d);
  ASSERT_TRUE(copy.is_ok()) << copy.status().to_string();
  EXPECT_EQ(copy->ranks[0].placement, Placement::kHostPrivate);
  EXPECT_EQ(copy->hosts[0].table_copies, 4);  // table x dp_local per node
  d.config.cpu_offload = false;
  const Result<PlanResult> device = plan(d);
  ASSERT_TRUE(device.is_ok()) << device.status().to_string();
  EXPECT_EQ(device->ranks[0].shard_group_size, 1);  // a replica's TP ranks
  d.engine.variant = "";
  const Result<PlanResult> device_main = plan(d);
  ASSERT_TRUE(device_main.is_ok()) << device_main.status().to_string();
  EXPECT_EQ(device_main->ranks[0].shard_group_size, 4);  // TP x the Engram DP group
  // Each reading names its source: main's merged code (the shared-table
  // default's fallback, the DP sharding PR), the variant vLLM's docs page.
  const RuleSource host = rule_of(engine_profile(EngineId::kVllm), rule_key::kHostPlacement).source;
  EXPECT_EQ(std::string_view(host.ref), "PR 57651");
  EXPECT_EQ(host.state, SourceState::kMerged);
  EXPECT_EQ(std::string_view(rule_of(engine_profile(EngineId::kVllm), rule_key::kDeviceShardGroup).source.ref),
            "PR 56512");
  const RuleSource docs = rule_of(engine_profile(EngineId::kVllm, "replica-copy"), rule_key::kHostPlacement).source;
  EXPECT_THAT(docs.path, HasSubstr("docs/features/engram.md"));
  EXPECT_EQ(docs.state, SourceState::kMerged);
}

// Point 12. SGLang's symmetric-memory device path (column-aligned shards
// read without a collective) is not confirmed on main by the search tools:
// it is the variant sglang+symm-mem, never the default.
TEST(EngineRules, Point12SglangSymmetricMemoryIsANamedVariant) {
  Deployment d = one_node(8, 1, EngineId::kSglang);
  const Result<PlanResult> main = plan(d);
  ASSERT_TRUE(main.is_ok()) << main.status().to_string();
  EXPECT_EQ(main->ranks[0].placement, Placement::kDeviceCollective);
  d.engine.variant = "symm-mem";
  const Result<PlanResult> symm = plan(d);
  ASSERT_TRUE(symm.is_ok()) << symm.status().to_string();
  EXPECT_EQ(symm->ranks[0].placement, Placement::kDevicePeer);  // 24 % 8 == 0: column-aligned
  Deployment odd = one_node(5, 1, EngineId::kSglang, "symm-mem");
  const Result<PlanResult> rows = plan(odd);
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  EXPECT_EQ(rows->ranks[0].placement, Placement::kDeviceCollective);  // 24 % 5 != 0
}

// Item 5: what the engine holds beside the tables is on the plan, counted
// or named "not counted".
TEST(EngineRules, ThePlanNamesWhatTheEngineHoldsBesideTheTables) {
  const Result<PlanResult> p = plan(one_node(2, 4, EngineId::kVllm));
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->engine_extra.bytes_per_host, 0u);
  ASSERT_EQ(p->engine_extra.not_counted.size(), 2u);
  EXPECT_THAT(p->engine_extra.not_counted[0], HasSubstr("NCCL's /dev/shm segments"));
  EXPECT_THAT(p->engine_extra.not_counted[1], AllOf(HasSubstr("tensor-parallel weight segments"), HasSubstr("57469")));
}

// plan --explain's data: each decision with the rule of the engine that made it.
TEST(EngineRules, EachDecisionNamesTheRuleAndEngineThatMadeIt) {
  Deployment d = one_node(2, 4, EngineId::kVllm);
  d.config.dp_shared_memory = false;
  const Result<PlanResult> p = plan(d);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  auto find = [&](std::string_view key) {
    return std::find_if(p->decided_by.begin(), p->decided_by.end(),
                        [&](const DecidedBy& e) { return e.rule_key == key; });
  };
  auto offload = find(rule_key::kCpuOffloadDefault);
  ASSERT_NE(offload, p->decided_by.end());
  EXPECT_EQ(offload->decision, "cpu_offload on (not written)");
  auto placement = find(rule_key::kHostPlacement);
  ASSERT_NE(placement, p->decided_by.end());
  EXPECT_EQ(placement->decision, "ranks 0-7: host_head_sharded");
  EXPECT_EQ(placement->engine, "vllm");
  auto rows = find(rule_key::kRowsBack);
  ASSERT_NE(rows, p->decided_by.end());
  EXPECT_THAT(rows->source, HasSubstr("vllm-project/vllm vllm/models/deepseek_v4_1/nvidia/engram.py @ 1c0e50e5 (merged)"));
}

}  // namespace
}  // namespace engram
