// `plan --from "ENGINE COMMAND LINE"` (apps/engine_command_line.h): what a
// user pastes plans as the deployment file that says the same; flags of no
// bearing are listed as ignored, unknown ones refused with a did-you-mean;
// an engine that lacks a setting keeps its column in a comparison.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "tests/engramlab_command.h"

namespace engram {
namespace {

using ::testing::HasSubstr;
using testing::run_engramlab;

nlohmann::json json_of(const std::string& args) {
  const auto out = run_engramlab(args + " --json", "", "2>/dev/null");
  auto j = nlohmann::json::parse(out.text, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out.text;
  return j;
}

const std::string kVllmLine =
    "\"vllm serve deepseek-ai/DeepSeek-V4.1-Flash -tp 1 -dp 8 --data-parallel-size-local 4 --max-model-len 32768\"";

TEST(EngineCommandLine, APastedVllmLinePlansAsItsDeploymentFile) {
  nlohmann::json from = json_of("plan --from " + kVllmLine);
  nlohmann::json file =
      json_of(std::string("plan --file ") + ENGRAM_SOURCE_DIR + "/scenarios/deployments/vllm_dep8_two_h200_nodes.yaml");
  ASSERT_TRUE(from.contains("ranks")) << from.dump();
  for (const char* key : {"model", "layout", "config", "engine", "groups", "ranks", "hosts", "memory_verdict",
                          "dp_shared_memory", "warnings", "error"})
    EXPECT_EQ(from[key], file[key]) << key;
  EXPECT_EQ(from["from_command_line"]["engine"], "vllm");
  EXPECT_EQ(from["from_command_line"]["plan_flags"]["hosts"], "2");
  EXPECT_EQ(from["from_command_line"]["plan_flags"]["model"], "deepseek-v4.1-flash");
}

TEST(EngineCommandLine, IgnoredFlagsAreListedAndUnknownOnesRefusedWithAGuess) {
  const auto ok = run_engramlab("plan --from \"vllm serve deepseek-ai/DeepSeek-V4.1-Flash -dp 2 --port 8000 "
                                "--trust-remote-code --max_model_len 32k\"");
  EXPECT_EQ(ok.exit_code, 0) << ok.text;
  EXPECT_THAT(ok.text, HasSubstr("ignored (no bearing on Engram): --port 8000, --trust-remote-code"));
  EXPECT_THAT(ok.text, HasSubstr("--context-length 32000"));  // vLLM's 32k: 32 x 10^3
  const auto typo = run_engramlab("plan --from \"vllm serve deepseek-ai/DeepSeek-V4.1-Flash --max-model-lenn 4096\"");
  EXPECT_EQ(typo.exit_code, 2) << typo.text;
  EXPECT_THAT(typo.text, HasSubstr("--max-model-lenn is not a flag of vllm serve"));
  EXPECT_THAT(typo.text, HasSubstr("--max-model-len"));
  const auto theirs = run_engramlab("plan --from \"vllm serve deepseek-ai/DeepSeek-V4.1-Flash --mem-fraction-static 0.8\"");
  EXPECT_EQ(theirs.exit_code, 2);
  EXPECT_THAT(theirs.text, HasSubstr("(it is SGLang's)"));
  const auto model = run_engramlab("plan --from \"vllm serve meta-llama/Llama-3-8B\"");
  EXPECT_EQ(model.exit_code, 2);
  EXPECT_THAT(model.text, HasSubstr("not a model engramlab has the Engram tables of"));
}

TEST(EngineCommandLine, CpuOffloadInEverySpelling) {
  for (const char* spelling : {"--cpu-offload false", "--cpu-offload=false", "--no-cpu-offload", "--cpu_offload false",
                               "--engram-config '{\\\"cpu_offload\\\": false}'"}) {
    const nlohmann::json j = json_of(std::string("plan --from \"vllm serve deepseek-ai/DeepSeek-V4.1-Flash -dp 2 ") +
                                     spelling + "\"");
    EXPECT_EQ(j["config"]["cpu_offload"], false) << spelling << " " << j.dump();
  }
  const nlohmann::json on = json_of("plan --from \"vllm serve deepseek-ai/DeepSeek-V4.1-Flash -dp 2 --cpu-offload\"");
  EXPECT_EQ(on["config"]["cpu_offload"], true);
}

TEST(EngineCommandLine, SglangDpAttentionSplitsTpOverTheReplicas) {
  const nlohmann::json j = json_of(
      "plan --from \"python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 16 --dp 16 "
      "--enable-dp-attention --nnodes 2 --context-length 65536 --host 0.0.0.0\"");
  EXPECT_EQ(j["layout"]["tp"], 1) << j.dump();
  EXPECT_EQ(j["layout"]["dp"], 16);
  EXPECT_EQ(j["hosts"].size(), 2u);
  EXPECT_EQ(j["engine"]["name"], "sglang");
  EXPECT_EQ(j["engine"]["context_length"], 65536);
}

// Expert, pipeline and prefill context parallelism in each engine's
// spelling (issue 48 item 4): EP and prefill CP land in the layout; a
// pipeline's later stages hold no Engram table and are counted as extra ranks.
TEST(EngineCommandLine, ExpertPipelineAndPrefillContextParallelismArePlanned) {
  const auto vllm = run_engramlab(
      "plan --from \"vllm serve deepseek-ai/DeepSeek-V4.1-Flash -dp 4 --enable-expert-parallel -pp 2 "
      "--prefill-context-parallel-size 2\"");
  EXPECT_EQ(vllm.exit_code, 0) << vllm.text;
  EXPECT_THAT(vllm.text, HasSubstr("--extra-ranks 4 --enable-expert-parallel true --prefill-cp 2"));
  EXPECT_THAT(vllm.text, HasSubstr("pipeline parallel 2: the first stage's 4 ranks hold the Engram tables"));
  const nlohmann::json v = json_of(
      "plan --from \"vllm serve deepseek-ai/DeepSeek-V4.1-Flash -dp 4 --enable-expert-parallel -pp 2 "
      "--prefill-context-parallel-size 2\"");
  EXPECT_EQ(v["layout"]["ep"], 4) << v.dump();
  EXPECT_EQ(v["layout"]["prefill_cp"], 2);
  EXPECT_EQ(v["layout"]["world_size"], 4);
  const nlohmann::json s = json_of(
      "plan --from \"python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 4 --ep-size 4 "
      "--pp-size 2\"");
  EXPECT_EQ(s["layout"]["tp"], 4) << s.dump();
  EXPECT_EQ(s["layout"]["ep"], 4);
  EXPECT_EQ(s["engine"]["name"], "sglang");
}

TEST(EngineCommandLine, AnEngineThatLacksASettingKeepsItsColumn) {
  const auto out = run_engramlab("plan --compare-engines --peer-shards --tp 8 --dp 1");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_THAT(out.text, HasSubstr("host_head_sharded, without peer_shards"));
  EXPECT_THAT(out.text, HasSubstr("refused as asked; without peer_shards:"));
  // The refusal in the engine's words, once, below the table.
  EXPECT_THAT(out.text, HasSubstr("vllm refused the deployment as asked (its column is planned without peer_shards):\n"
                                  "  config.peer_shards (true): engine vllm refuses it"));
  EXPECT_THAT(out.text, HasSubstr("defaults used (not written by you):"));
}

}  // namespace
}  // namespace engram
