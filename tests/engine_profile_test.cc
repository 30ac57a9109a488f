// The engine profiles (core/engines/): each engine's rules as its own code
// has them, each difference pinned here with the engine file it comes from,
// and engramlab keeping today's answers. Tests that need vLLM's device
// placement (device_head_sharded) live in engine_profile_head_sharded_test.cc.
#include "core/engines/engine_profile.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/deployment_file/deployment_yaml.h"
#include "core/model/row_format.h"
#include "core/plan/deployment_plan.h"
#include "core/report/engine_comparison.h"
#include "tests/engine_test_support.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

using ::testing::HasSubstr;
using ::testing::Not;

HostSpec host(std::string name, int gpus, uint64_t tmpfs_bytes = 0) {
  return testing::gb200_host(std::move(name), gpus, tmpfs_bytes);
}

Deployment world_of(const std::vector<int>& node_of_rank, int dp, int replica_size, EngineId engine) {
  return testing::vllm_world_of(node_of_rank, dp, replica_size, engine);
}

Result<PlanResult> plan(const Deployment& d) {
  WarningSink quiet;
  return plan_deployment(d, quiet);
}

int group_size_of_rank0(const Deployment& d) {
  const Result<PlanResult> p = plan(d);
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return p.is_ok() ? p->ranks.front().node_local_group_size : -1;
}

struct ShardCase {
  std::vector<int> nodes;
  int dp, replica, vllm_size;
};

std::vector<int> repeat(std::initializer_list<std::pair<int, int>> runs) {
  std::vector<int> out;
  for (auto [node, count] : runs) out.insert(out.end(), static_cast<size_t>(count), node);
  return out;
}

// vLLM tests/distributed/test_engram_dp_shard.py,
// test_engram_dp_shard_size_respects_node_boundaries, its newest 9 cases
// (node id per rank, dp, replica size) -> size, planned through the vLLM
// profile: the size every rank's node-local group gets.
const std::vector<ShardCase> kVllmCases = {
    {repeat({{0, 4}}), 1, 4, 1},
    {repeat({{0, 4}}), 4, 1, 4},
    {repeat({{0, 4}}), 2, 2, 2},
    {repeat({{0, 8}, {1, 8}}), 8, 2, 4},
    {repeat({{0, 6}, {1, 6}}), 4, 1, 2},  // 12 ranks, dp x replica = 4: 8 extra ranks
    {repeat({{0, 3}, {1, 4}}), 7, 1, 1},
    {repeat({{0, 8}, {1, 8}, {2, 8}}), 8, 3, 1},
    {{0, 1, 0, 1, 0, 1, 0, 1}, 4, 2, 1},
    {repeat({{0, 3}, {1, 5}}), 4, 2, 1},
};

TEST(EngineProfile, VllmGroupSizeTheNineCasesOfItsNewestTest) {
  ASSERT_EQ(kVllmCases.size(), 9u);
  for (const ShardCase& c : kVllmCases) {
    const Deployment d = world_of(c.nodes, c.dp, c.replica, EngineId::kVllm);
    SCOPED_TRACE(::testing::Message() << "world " << c.nodes.size() << " dp " << c.dp << " replica " << c.replica);
    const Result<PlanResult> p = plan(d);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    for (const RankPlan& rp : p->ranks) EXPECT_EQ(rp.node_local_group_size, c.vllm_size) << "rank " << rp.rank;
  }
}

// On purpose: engramlab groups by the real rank -> host map
// (core/deployment/node_local_group.h), so where vLLM insists on whole,
// equal, contiguous nodes it answers otherwise.
TEST(EngineProfile, EngramlabKeepsItsOwnGroupsWhereVllmFallsBack) {
  // dp 7 over nodes of 3 and 4: engramlab groups of 3 and 4, vLLM 1.
  {
    const Deployment e = world_of(repeat({{0, 3}, {1, 4}}), 7, 1, EngineId::kEngramlab);
    const Result<PlanResult> p = plan(e);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_EQ(p->ranks[0].node_local_group_size, 3);
    EXPECT_EQ(p->ranks[6].node_local_group_size, 4);
    EXPECT_EQ(group_size_of_rank0(world_of(repeat({{0, 3}, {1, 4}}), 7, 1, EngineId::kVllm)), 1);
  }
  // Interleaved ranks: engramlab still groups each host's replicas (2), vLLM falls back to 1.
  EXPECT_EQ(group_size_of_rank0(world_of({0, 1, 0, 1, 0, 1, 0, 1}, 4, 2, EngineId::kEngramlab)), 1);
  EXPECT_EQ(group_size_of_rank0(world_of({0, 1, 0, 1, 0, 1, 0, 1}, 8, 1, EngineId::kEngramlab)), 4);
  EXPECT_EQ(group_size_of_rank0(world_of({0, 1, 0, 1, 0, 1, 0, 1}, 8, 1, EngineId::kVllm)), 1);
  // The 12-rank world: engramlab sees only the Engram ranks (all four on
  // node 0: one group of 4); vLLM sizes over the whole world (gcd(4, 6) = 2).
  EXPECT_EQ(group_size_of_rank0(world_of(repeat({{0, 6}, {1, 6}}), 4, 1, EngineId::kEngramlab)), 4);
  EXPECT_EQ(group_size_of_rank0(world_of(repeat({{0, 6}, {1, 6}}), 4, 1, EngineId::kVllm)), 2);
}

// SGLang has no node-local Engram DP group (docs/design.md section 9): each rank is its own.
TEST(EngineProfile, SglangHasNoNodeLocalGroup) {
  const Deployment d = world_of(repeat({{0, 4}}), 4, 1, EngineId::kSglang);
  const NodeLocalGroups g = engine_profile(EngineId::kSglang).node_local_groups(engine_profile(EngineId::kSglang), d);
  EXPECT_EQ(g.group_count, 4);
  EXPECT_EQ(g.size_by_rank, std::vector<int>(4, 1));
  const EngineProfile& ours = engine_profile(EngineId::kEngramlab);
  const EngineProfile& vllm = engine_profile(EngineId::kVllm);
  EXPECT_EQ(ours.node_local_groups(ours, d).size_by_rank, std::vector<int>(4, 4));
  EXPECT_EQ(vllm.node_local_groups(vllm, d).size_by_rank, std::vector<int>(4, 4));
}

// The registry: names, order, and a name that is none of them.
TEST(EngineProfile, RegistryNamesAndUnknownNames) {
  ASSERT_EQ(engine_registry().size(), kEngineCount);
  EXPECT_STREQ(engine_name(EngineId::kEngramlab), "engramlab");
  EXPECT_STREQ(engine_name(EngineId::kVllm), "vllm");
  EXPECT_STREQ(engine_name(EngineId::kSglang), "sglang");
  EXPECT_EQ(engine_names_text(), "engramlab, vllm or sglang");
  for (const EngineProfile& e : engine_registry()) EXPECT_EQ(parse_engine(e.name, "--engine").value(), e.id);
  const Result<EngineId> bad = parse_engine("vlm", "--engine");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr(golden_message("engine.unknown_vlm")));
  EXPECT_THAT(bad.status().message(), HasSubstr("did you mean 'vllm'?"));
  EXPECT_THAT(parse_engine("tensorrt", "engine.name").status().message(), Not(HasSubstr("did you mean")));
}

Deployment two_hosts(EngineId engine, int tp, int dp) {
  Deployment d;
  d.hosts = {host("a", tp * dp / 2), host("b", tp * dp / 2)};
  d.layout.tp = tp;
  d.layout.dp = dp;
  d.engine.profile = engine;
  return d;
}

// vLLM: EngramConfig.cpu_offload defaults to true (a plain default since PR
// 57937 dropped VLLM_PLE_CPU_OFFLOAD, which defaulted to true), so an unwritten
// cpu_offload plans host tables; engramlab and SGLang default to device tables.
TEST(EngineProfile, CpuOffloadDefaultIsTheEngines) {
  const Result<PlanResult> vllm = plan(two_hosts(EngineId::kVllm, 2, 4));
  ASSERT_TRUE(vllm.is_ok()) << vllm.status().to_string();
  EXPECT_TRUE(vllm->deployment.config.cpu_offload);
  EXPECT_FALSE(is_device_placement(vllm->ranks[0].placement));
  bool announced = false;
  for (const DefaultUsed& u : vllm->deployment.defaults_used)
    announced |= u.field == "config.cpu_offload" && u.source.find("PR 57937") != std::string::npos;
  EXPECT_TRUE(announced);
  for (EngineId id : {EngineId::kEngramlab, EngineId::kSglang}) {
    const Result<PlanResult> p = plan(two_hosts(id, 2, 4));
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_FALSE(p->deployment.config.cpu_offload) << engine_name(id);
    EXPECT_EQ(p->ranks[0].placement, Placement::kDeviceCollective) << engine_name(id);
  }
}

// vLLM's host tables without dp_shared_memory are DP head shards over the
// node-local Engram DP group (vllm/model_executor/layers/engram/common/
// engram_parallel.py), never a private copy per replica as engramlab plans.
TEST(EngineProfile, VllmShardsHostTablesWhereEngramlabKeepsPrivateCopies) {
  for (EngineId id : {EngineId::kEngramlab, EngineId::kVllm}) {
    Deployment d = two_hosts(id, 1, 8);
    d.config.cpu_offload = true;
    d.config.cpu_offload_given = true;
    d.config.dp_shared_memory = false;
    const Result<PlanResult> p = plan(d);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_EQ(p->ranks[0].placement, id == EngineId::kVllm ? Placement::kHostHeadSharded : Placement::kHostPrivate);
  }
}

Status refusal(const Deployment& d) {
  const Result<PlanResult> p = plan(d);
  return p.is_ok() ? Status::ok() : p.status();
}

// vLLM (its Engram layer's embedding, engram.py): shards of ceil(H / P)
// heads must leave the last shard a head, `(P - 1) * ceil(H / P) < H`, or
// "Engram sharding leaves ranks without hash heads"; SGLang splits rows (any
// tp) and engramlab accepts it as today.
TEST(EngineProfile, VllmRefusesTpAboveTheHeadCount) {
  Deployment d = two_hosts(EngineId::kVllm, 32, 1);
  d.hosts = {host("a", 32)};
  d.config.cpu_offload = true;  // the host layout splits heads over TP as well
  d.config.cpu_offload_given = true;
  const Status s = refusal(d);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("layout.tp (32): engine vllm refuses it"));
  EXPECT_THAT(s.message(), HasSubstr("without hash heads"));
  EXPECT_THAT(s.message(), HasSubstr("24 heads over 32 shards"));
  // Not only above the head count: 24 heads over 16 shards are 2 each, and
  // the 13th shard on get none; over 7, 4 each leave the 7th none.
  for (int tp : {16, 7}) {
    Deployment fewer = d;
    fewer.layout.tp = tp;
    fewer.hosts = {host("a", tp)};
    EXPECT_THAT(refusal(fewer).message(), HasSubstr(fmt::format("layout.tp ({}): engine vllm refuses it", tp)));
    fewer.engine.profile = EngineId::kEngramlab;
    EXPECT_TRUE(refusal(fewer).is_ok()) << refusal(fewer).to_string();
  }
  for (EngineId id : {EngineId::kEngramlab, EngineId::kSglang}) {
    d.engine.profile = id;
    if (id == EngineId::kSglang) d.config.host_layout = "per_rank";
    EXPECT_TRUE(refusal(d).is_ok()) << engine_name(id) << ": " << refusal(d).to_string();
  }
  d.config.host_layout.clear();
  d.engine.profile = EngineId::kVllm;
  d.layout.tp = 24;
  d.hosts = {host("a", 24)};
  EXPECT_TRUE(refusal(d).is_ok()) << refusal(d).to_string();
}

// vLLM under elastic EP refuses dp_shared_memory, and embedding_across_dp
// with dp > 1; thp_packing needs cpu_offload and no dp_shared_memory
// (vllm/config: the Engram config's checks; our words).
TEST(EngineProfile, VllmValidationsInItsOwnTerms) {
  Deployment elastic = two_hosts(EngineId::kVllm, 1, 4);
  elastic.layout.elastic_ep = true;
  elastic.config.dp_shared_memory = true;
  EXPECT_THAT(refusal(elastic).message(),
              HasSubstr("config.dp_shared_memory (true): engine vllm refuses it: elastic expert"));

  elastic.config.dp_shared_memory.reset();
  elastic.config.embedding_across_dp = true;
  EXPECT_THAT(refusal(elastic).message(),
              HasSubstr("config.embedding_across_dp (true): engine vllm refuses it: elastic expert"));
  elastic.layout.dp = 1;
  elastic.hosts = {host("a", 1)};
  EXPECT_TRUE(refusal(elastic).is_ok()) << refusal(elastic).to_string();

  Deployment thp = two_hosts(EngineId::kVllm, 1, 4);
  thp.config.thp_packing = true;
  thp.config.cpu_offload_given = true;  // written off
  Status s = refusal(thp);
  EXPECT_THAT(s.message(), HasSubstr("config.thp_packing (true): engine vllm refuses it"));
  EXPECT_THAT(s.message(), HasSubstr("cpu_offload off"));
  thp.config.cpu_offload = true;  // dp 4: dp_shared_memory resolves enabled
  s = refusal(thp);
  EXPECT_THAT(s.message(), HasSubstr("config.thp_packing (true): engine vllm refuses it"));
  EXPECT_THAT(s.message(), HasSubstr("dp_shared_memory"));
  thp.config.dp_shared_memory = false;
  EXPECT_TRUE(refusal(thp).is_ok()) << refusal(thp).to_string();
}

// A setting an engine does not have is refused naming the engine and whose
// setting it is; a layout an engine does not offer names those that do.
TEST(EngineProfile, SettingsAndLayoutsAnEngineDoesNotHave) {
  Deployment d = two_hosts(EngineId::kEngramlab, 1, 4);
  d.config.thp_packing = true;
  Status s = refusal(d);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("config.thp_packing (true): engine engramlab refuses it"));
  EXPECT_THAT(s.message(), HasSubstr("--engine vllm"));

  d = two_hosts(EngineId::kSglang, 1, 4);
  d.config.dp_shared_memory = true;
  EXPECT_THAT(refusal(d).message(), HasSubstr("config.dp_shared_memory (true): engine sglang refuses it"));

  d = two_hosts(EngineId::kVllm, 1, 4);
  d.config.peer_shards = true;
  EXPECT_THAT(refusal(d).message(), HasSubstr("config.peer_shards (true): engine vllm refuses it"));

  d = two_hosts(EngineId::kVllm, 1, 4);
  d.config.host_layout = "numa_shared";
  s = refusal(d);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("config.host_layout: engine vllm has no host layout 'numa_shared'; it offers auto"));
  EXPECT_THAT(s.message(), HasSubstr("--engine sglang"));

  d.engine.profile = EngineId::kSglang;
  d.config.host_layout = "tmpfs";
  EXPECT_THAT(refusal(d).message(),
              HasSubstr("engine sglang has no host layout 'tmpfs'; it offers shared, per_rank"));
}

// SGLang's host layouts build SGLang's placements by name (its `per_rank`
// is row shards over the group, not our host_private: sglang_private.h);
// `file` exists only in forks: the variant sglang+file.
TEST(EngineProfile, SglangHostLayoutsByName) {
  Deployment d = two_hosts(EngineId::kSglang, 1, 4);
  d.config.host_layout = "per_rank";
  const Result<PlanResult> p = plan(d);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_TRUE(p->deployment.config.cpu_offload);  // a layout written asks for host tables
  EXPECT_EQ(p->ranks[0].placement, Placement::kSglangPrivate);
  d.config.host_layout = "file";
  d.engine.variant = "file";
  const Result<PlanResult> file = plan(d);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ(file->ranks[0].placement, Placement::kSglangFile);
}

// A placement a profile names that this build lacks is a clear
// failed_precondition naming the engine, what asked and the placement
// (vLLM's device layout answered so before device_head_sharded landed).
TEST(EngineProfile, APlacementThisBuildLacksIsNamed) {
  const Result<Placement> missing =
      placement_named(engine_profile(EngineId::kVllm), "no_such_placement", "a device layout (cpu_offload off)");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("engine vllm: a device layout (cpu_offload off) builds the placement 'no_such_placement', "
                        "which this build of engramlab does not have"));
  const Result<Placement> present =
      placement_named(engine_profile(EngineId::kVllm), "device_head_sharded", "a device layout (cpu_offload off)");
  ASSERT_TRUE(present.is_ok()) << present.status().to_string();
  EXPECT_EQ(*present, Placement::kDeviceHeadSharded);
}

// The scale-byte rule is the profile's: vLLM's reference decodes byte 0 to
// +0 and 255 to +inf (tests/distributed/test_engram_dp_shard.py `_reference`:
// `(scales << 23).view(float32)`); SGLang's CUDA engram_gather to 2^-127
// (`_E8M0_ZERO = 2.0**-127`; its scale-byte test asserts 2**-127) and +inf
// (the exponent bits); its torch fallback to 2^-127 and NaN.
TEST(EngineProfile, ScaleByteRuleOfEachEngine) {
  EXPECT_EQ(engine_profile(EngineId::kEngramlab).scale_byte_rule, ScaleByteRule::kVllm);
  EXPECT_EQ(engine_profile(EngineId::kVllm).scale_byte_rule, ScaleByteRule::kVllm);
  const ScaleByteRule sglang = engine_profile(EngineId::kSglang).scale_byte_rule;
  EXPECT_EQ(sglang, ScaleByteRule::kSglang);
  EXPECT_EQ(ue8m0_to_float(0, sglang), std::ldexp(1.0f, -127));  // SGLang's test: exactly 2**-127
  EXPECT_EQ(dequantize_fp8_e4m3_to_bf16(0x38, 0, sglang), 0x0040);  // 1.0 x 2^-127 in bf16
  EXPECT_TRUE(std::isinf(ue8m0_to_float(255, sglang)));
  EXPECT_TRUE(std::isnan(ue8m0_to_float(255, engine_profile(EngineId::kSglang, "torch-fallback").scale_byte_rule)));
  EXPECT_EQ(ue8m0_to_float(0, engine_profile(EngineId::kVllm).scale_byte_rule), 0.0f);
  EXPECT_TRUE(std::isinf(ue8m0_to_float(255, engine_profile(EngineId::kVllm).scale_byte_rule)));
  ModelSpec model = model_preset("tiny").value();
  apply_engine_value_rules(engine_profile(EngineId::kSglang), false, model);
  for (const TableSpec& t : model.tables) EXPECT_EQ(t.scale_byte_rule, ScaleByteRule::kSglang);
}

// `engine: {name: ...}` in the deployment file, beside gpu_memory_fraction.
TEST(EngineProfile, DeploymentFileNamesTheEngine) {
  const std::string text =
      "hosts: [{name: a, gpus: 4, gpu_model: GB200}]\n"
      "layout: {tp: 1, dp: 4, extra_ranks: 0}\n"
      "config: {thp_packing: true, cpu_offload: true, dp_shared_memory: false}\n"
      "engine: {name: vllm, gpu_memory_fraction: 0.8}\n";
  const Result<Deployment> d = parse_deployment_text(text, "test.yaml");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->engine.profile, EngineId::kVllm);
  EXPECT_TRUE(d->config.thp_packing);
  EXPECT_TRUE(d->config.cpu_offload_given);
  EXPECT_TRUE(refusal(*d).is_ok()) << refusal(*d).to_string();
  const Result<Deployment> bad = parse_deployment_text("engine: {name: sglng}\n", "test.yaml");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("engine.name"));
  EXPECT_THAT(bad.status().message(), HasSubstr("'sglng' is not an engine"));
  EXPECT_THAT(bad.status().message(), HasSubstr(golden_message("engine.did_you_mean_sglang")));
}

// One deployment, a column per engine (item 5), figures from each engine's plan.
TEST(EngineProfile, ComparisonHasAColumnPerEngine) {
  Deployment d = two_hosts(EngineId::kEngramlab, 2, 4);
  d.hosts[0].tmpfs_bytes_total = d.hosts[1].tmpfs_bytes_total = 256ull << 30;
  const EngineId all[] = {EngineId::kVllm, EngineId::kSglang, EngineId::kEngramlab};
  const std::vector<EngineColumn> cols = compare_engines(d, all);
  ASSERT_EQ(cols.size(), 3u);
  const EngineColumn& vllm = cols[0];
  const EngineColumn& sglang = cols[1];
  const EngineColumn& ours = cols[2];
  ASSERT_TRUE(vllm.status.is_ok()) << vllm.status.to_string();
  EXPECT_TRUE(vllm.cpu_offload);
  EXPECT_EQ(vllm.placement, "host_shared");
  EXPECT_EQ(vllm.table_copies_per_node_max, 1);
  EXPECT_EQ(vllm.node_local_group_min, 2);
  // Only the TP assembly: heads over TP 2, 24 + 24 heads x 256 values x 2 B.
  ASSERT_EQ(vllm.collectives.size(), 1u);
  EXPECT_EQ(vllm.collective_bytes_per_token, 48u * 256 * 2);
  EXPECT_EQ(vllm.scale_bytes, "0 -> +0, 255 -> +inf");
  for (const EngineColumn* c : {&sglang, &ours}) {
    ASSERT_TRUE(c->status.is_ok()) << c->status.to_string();
    EXPECT_FALSE(c->cpu_offload);
    EXPECT_EQ(c->placement, "device_collective");
    EXPECT_EQ(c->tp_split, "rows");
    EXPECT_GT(c->hbm_bytes_per_gpu_max, vllm.hbm_bytes_per_gpu_max + (188ull << 30) / 8);
    // ids all-gathered (48 heads x 8 B) and rows reduce-scattered (48 x 256 x 2 B) over the 8 ranks.
    EXPECT_EQ(c->collective_bytes_per_token, 48u * 8 + 48u * 256 * 2);
    EXPECT_LT(c->kv_cache_left_bytes_min, vllm.kv_cache_left_bytes_min);
  }
  EXPECT_EQ(sglang.scale_bytes, "0 -> 2^-127, 255 -> +inf");
  // The table's columns are padded to align: compare with the padding collapsed.
  std::string table;
  for (char c : format_engine_comparison(cols))
    if (!(c == ' ' && !table.empty() && table.back() == ' ')) table += c;
  EXPECT_THAT(table, HasSubstr("| vllm | sglang | engramlab"));
  EXPECT_THAT(table, HasSubstr("| host_shared | device_collective | device_collective"));
  const Json j = engine_comparison_json(cols);
  ASSERT_EQ(j["engines"].size(), 3u);
  EXPECT_EQ(j["engines"][1]["engine"], "sglang");
  EXPECT_EQ(j["engines"][0]["placement"], "host_shared");
  EXPECT_EQ(j["engines"][2]["collective_bytes_per_token"], 48u * 8 + 48u * 256 * 2);
}

}  // namespace
}  // namespace engram
