// A model's token space (compressed vocabulary, pad id, DEAD-token rule,
// hash seed): the presets' values, and setting them from a deployment file
// (`model:` as a map), a scenario's `lookup.model`, plan's report, and an
// emulated lookup hashed with them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/deployment_file/deployment_yaml.h"
#include "core/model/hash_overrides.h"
#include "core/model/hashing.h"
#include "core/plan/deployment_plan.h"
#include "core/report/plan_report.h"
#include "harness/emulated_scenario.h"
#include "harness/scenario.h"

namespace engram {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr const char* kHostsAndLayout = R"(
hosts:
  - {name: gb200-0, gpus: 4, gpu_model: GB200, shm_size: 190GiB}
layout: {tp: 1, dp: 4}
config: {cpu_offload: true}
)";

Result<Deployment> deployment_with(std::string model_line) {
  return parse_deployment_text(model_line + kHostsAndLayout, "d.yaml");
}

std::string error_of(std::string model_line) {
  auto d = deployment_with(std::move(model_line));
  EXPECT_FALSE(d.is_ok());
  if (d.is_ok()) return "";
  EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
  return d.status().message();
}

TEST(ModelTokenSpace, PresetsStateTheirTokenSpace) {
  auto v41 = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(v41.is_ok());
  EXPECT_EQ(v41->engram_vocab_size, 16'000'000);
  EXPECT_EQ(v41->compressed_vocab_size, 99'092);
  EXPECT_EQ(v41->pad_id, 2);
  EXPECT_EQ(v41->dead_token_rule, DeadTokenRule::kBarrier);
  EXPECT_EQ(v41->seed, 0u);
  auto tiny = model_preset("tiny");
  ASSERT_TRUE(tiny.is_ok());
  EXPECT_LT(tiny->compressed_vocab_size, tiny->engram_vocab_size);  // as in V4.1
  EXPECT_LT(tiny->pad_id, tiny->compressed_vocab_size);
  for (DeadTokenRule rule : {DeadTokenRule::kBarrier, DeadTokenRule::kBarrierNoRow, DeadTokenRule::kLiteral})
    EXPECT_EQ(parse_dead_token_rule(dead_token_rule_name(rule)), rule);
  EXPECT_FALSE(parse_dead_token_rule("skip").has_value());
}

TEST(ModelTokenSpace, DeploymentModelMapSetsTheTokenSpaceAndPlanShowsIt) {
  auto plain = deployment_with("model: deepseek-v4.1-flash");
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_TRUE(plain->model_hash.empty());
  WarningSink sink;
  auto plan = plan_deployment(plain.value(), sink);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_THAT(format_plan_report(plan.value()),
              HasSubstr("hash ids: compressed vocabulary 99,092, pad id 2, DEAD tokens barrier, seed 0\n"));
  const Json hash = plan_json(plan.value())["model"]["hash"];
  EXPECT_EQ(hash["compressed_vocab_size"], 99'092);
  EXPECT_EQ(hash["pad_id"], 2);
  EXPECT_EQ(hash["dead_tokens"], "barrier");
  EXPECT_EQ(hash["seed"], 0u);

  auto set = deployment_with(
      "model: {name: deepseek-v4.1-flash, compressed_vocab_size: 128000, pad_id: 1, dead_tokens: literal, "
      "hash_seed: 18446744073709551615}");
  ASSERT_TRUE(set.is_ok()) << set.status().to_string();
  EXPECT_EQ(set->model, "deepseek-v4.1-flash");
  EXPECT_EQ(set->model_hash.compressed_vocab_size, 128'000);
  EXPECT_EQ(set->model_hash.pad_id, 1);
  EXPECT_EQ(set->model_hash.dead_token_rule, DeadTokenRule::kLiteral);
  EXPECT_EQ(set->model_hash.seed, 18446744073709551615ull);
  EXPECT_EQ(set->model_hash.to_text(),
            "{compressed_vocab_size: 128000, pad_id: 1, dead_tokens: literal, hash_seed: 18446744073709551615}");
  plan = plan_deployment(set.value(), sink);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const std::string report = format_plan_report(plan.value());
  EXPECT_THAT(report, HasSubstr("hash ids: compressed vocabulary 128,000, pad id 1, DEAD tokens literal, "
                                "seed 18446744073709551615\n"));
  // The token space moves no byte: plan's table sizes stay exact.
  EXPECT_THAT(report, HasSubstr("layer 1: 24 heads, 384,006,168 rows, 101,377,628,352 B"));
  EXPECT_THAT(report, HasSubstr("layer 14: 24 heads, 384,016,682 rows, 101,380,404,048 B"));

  // Only some settings: the rest stay the preset's.
  auto some = deployment_with("model: {name: tiny, pad_id: 5}");
  ASSERT_TRUE(some.is_ok()) << some.status().to_string();
  auto spec = resolve_model(some->model, some->model_hash, "model");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->pad_id, 5);
  EXPECT_EQ(spec->compressed_vocab_size, model_preset("tiny")->compressed_vocab_size);
}

TEST(ModelTokenSpace, BadModelSettingsNameLineColumnFieldValueAndFix) {
  EXPECT_THAT(error_of("model: {name: tiny, pad: 5}"),
              AllOf(HasSubstr("line 1, column 21"), HasSubstr("model.pad: unknown field 'pad'"),
                    HasSubstr("compressed_vocab_size, pad_id, dead_tokens, hash_seed")));
  EXPECT_THAT(error_of("model: {name: tiny, pad_id: 640}"),
              AllOf(HasSubstr("line 1, column 29"), HasSubstr("model.pad_id"), HasSubstr("pad id 640"),
                    HasSubstr("[0, 640)"), HasSubstr("below compressed_vocab_size")));
  // A smaller vocabulary leaves the preset's pad id out: named at the vocabulary.
  EXPECT_THAT(error_of("model: {name: deepseek-v4.1-flash, compressed_vocab_size: 2}"),
              AllOf(HasSubstr("line 1, column 59"), HasSubstr("model.compressed_vocab_size"), HasSubstr("pad id 2")));
  EXPECT_THAT(error_of("model: {name: tiny, compressed_vocab_size: 0}"),
              AllOf(HasSubstr("model.compressed_vocab_size: 0 is out of range; it must be at least 1")));
  EXPECT_THAT(error_of("model: {name: tiny, compressed_vocab_size: lots}"),
              HasSubstr("model.compressed_vocab_size: 'lots' is not a whole number; write e.g. 99092"));
  EXPECT_THAT(error_of("model: {name: tiny, pad_id: -1}"), HasSubstr("model.pad_id: -1 is out of range"));
  EXPECT_THAT(error_of("model: {name: tiny, hash_seed: 18446744073709551616}"),
              HasSubstr("model.hash_seed: 18446744073709551616 is out of range"));
  EXPECT_THAT(error_of("model: {name: tiny, dead_tokens: skip}"),
              AllOf(HasSubstr("model.dead_tokens: 'skip' is not a DEAD-token rule"), HasSubstr("barrier"),
                    HasSubstr("barrier_no_row"), HasSubstr("literal")));
  EXPECT_THAT(error_of("model: {pad_id: 1}"), HasSubstr("model.name: missing"));
  EXPECT_THAT(error_of("model: {name: deepseek-v9, pad_id: 1}"),
              AllOf(HasSubstr("model.name: unknown model 'deepseek-v9'"),
                    HasSubstr("deepseek-v4.1-flash, deepseek-v4.1-flash-layer1, example-3x16-bf16, tiny")));
  EXPECT_THAT(error_of("model: [tiny]"), HasSubstr("expected a model name or a map"));
}

constexpr const char* kScenario = R"(
hosts:
  - {name: gb200-0, gpus: 4, gpu_model: GB200, shm_size: 190GiB}
layout: {tp: 2, dp: 2}
config: {cpu_offload: true}
seed: 4
lookup: {model: LOOKUP_MODEL, tokens: 12}
expect:
  placement: host_shared
  lookup_equal: true
)";

Result<harness::Scenario> scenario_with(const std::string& lookup_model) {
  std::string text = kScenario;
  text.replace(text.find("LOOKUP_MODEL"), 12, lookup_model);
  return harness::parse_scenario_text(text, "token_space.yaml");
}

TEST(ModelTokenSpace, ScenarioLookupHashesWithItsTokenSpace) {
  auto plain = scenario_with("tiny");
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  auto literal = scenario_with("{name: tiny, compressed_vocab_size: 100000, pad_id: 99999, dead_tokens: literal}");
  ASSERT_TRUE(literal.is_ok()) << literal.status().to_string();
  EXPECT_EQ(literal->lookup.model, "tiny");
  EXPECT_EQ(literal->lookup.model_hash.pad_id, 99'999);

  // Both pass (every rank's lookup equals the direct one) and hash different ids.
  harness::ScenarioOutcome a = harness::run_scenario(plain.value());
  harness::ScenarioOutcome b = harness::run_scenario(literal.value());
  EXPECT_TRUE(a.passed) << (a.failures.empty() ? "" : a.failures[0]);
  EXPECT_TRUE(b.passed) << (b.failures.empty() ? "" : b.failures[0]);
  harness::EmulatedJob job;
  job.deployment = plain->deployment;
  job.seed = 4;
  job.lookup = plain->lookup;
  const harness::EmulatedOutcome plain_run = harness::run_emulated_job(job);
  job.lookup = literal->lookup;
  const harness::EmulatedOutcome literal_run = harness::run_emulated_job(job);
  ASSERT_EQ(plain_run.ranks.size(), 4u);
  ASSERT_EQ(literal_run.ranks.size(), 4u);
  ASSERT_FALSE(plain_run.ranks[0].lookup_hashes.empty());
  EXPECT_NE(plain_run.ranks[0].lookup_hashes, literal_run.ranks[0].lookup_hashes);

  // Only tiny is built for the lookup, whatever the form.
  auto big = scenario_with("{name: deepseek-v4.1-flash, pad_id: 3}");
  ASSERT_FALSE(big.is_ok());
  EXPECT_THAT(big.status().message(), AllOf(HasSubstr("lookup.model"), HasSubstr("write tiny")));
  auto bad = scenario_with("{name: tiny, pad_id: 100000}");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("lookup.model.pad_id"), HasSubstr("[0, 640)")));
}

}  // namespace
}  // namespace engram
