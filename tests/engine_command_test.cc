// `plan --engine`: one engine's rules, several engines side by side
// (--engine a,b / --compare-engines), and bad input naming the engine, the
// value and what is known.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/engramlab_command.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_engramlab;

const std::string kTp2Dp4 = "plan --tp 2 --dp 4 --hosts 2 --gpus-per-host 4 --gpu-model GB200 ";

TEST(EngineCommand, AnUnknownEngineIsExit2NamingTheValueAndTheEngines) {
  auto r = run_engramlab(kTp2Dp4 + "--engine trtllm");
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, HasSubstr("--engine: 'trtllm' is not an engine; give engramlab, vllm or sglang"));
  r = run_engramlab(kTp2Dp4 + "--engine sglan");
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, HasSubstr(golden_message("engine.did_you_mean_sglang")));
  r = run_engramlab(kTp2Dp4 + "--engine vllm,vllm");
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, HasSubstr("'vllm' is named twice"));
}

TEST(EngineCommand, ALayoutOrAConfigTheEngineRefusesIsExit2SayingWhy) {
  auto r = run_engramlab(kTp2Dp4 + "--engine vllm --host-layout numa_shared");
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr("engine vllm has no host layout 'numa_shared'"), HasSubstr("--engine sglang")));
  r = run_engramlab("plan --tp 32 --dp 1 --hosts 1 --gpus-per-host 32 --engine vllm");
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, HasSubstr("layout.tp (32): engine vllm refuses it: Engram sharding leaves ranks without hash "
                                "heads: 24 heads over 32 shards"));
  r = run_engramlab(kTp2Dp4 + "--engine sglang --thp-packing");
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, HasSubstr("config.thp_packing (true): engine sglang refuses it"));
}

// The example under each engine's rules: engramlab answers row
// shards on the GPUs as today; vLLM, whose cpu_offload defaults on, host tables.
TEST(EngineCommand, OneEngineSaysWhoseRulesPlannedIt) {
  auto r = run_engramlab(kTp2Dp4);
  EXPECT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr("engine: engramlab (tables split over TP by rows on the GPU"),
                            HasSubstr("ranks 0-7: device_collective")));
  r = run_engramlab(kTp2Dp4 + "--engine vllm --shm-size 200GiB");
  EXPECT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr("engine: vllm (tables split over TP by heads on the GPU"),
                            HasSubstr("config.cpu_offload: true (engine vllm's default"), HasSubstr("PR 57937"),
                            HasSubstr("host_shared")));
}

// vLLM's 12-rank case (tests/distributed/test_engram_dp_shard.py: nodes
// [0]*6 + [1]*6, dp 4, replica 1 -> 2): the world holds 8 ranks beyond
// tp x dp, and vLLM sizes its group over all 12; engramlab groups the four
// Engram ranks on node 0 together, on purpose.
TEST(EngineCommand, ExtraRanksSizeVllmsGroupNotOurs) {
  const std::string world = "plan --tp 1 --dp 4 --extra-ranks 8 --hosts 2 --gpu-model GB200 --cpu-offload ";
  auto vllm = run_engramlab(world + "--engine vllm");
  EXPECT_EQ(vllm.exit_code, 0) << vllm.text;
  EXPECT_THAT(vllm.text, HasSubstr("ranks 0-3: host_head_sharded, 2 groups of 2 (node-local DP group)"));
  auto ours = run_engramlab(world);
  EXPECT_EQ(ours.exit_code, 0) << ours.text;
  EXPECT_THAT(ours.text, HasSubstr("ranks 0-3: host_head_sharded, 1 group of 4 (node-local DP group)"));
}

// The comparison's text with its column padding collapsed ("vllm    | sglang" -> "vllm | sglang").
std::string unpadded(std::string text) {
  std::string out;
  for (char c : text)
    if (!(c == ' ' && !out.empty() && out.back() == ' ')) out += c;
  return out;
}

// A row of the comparison, each column's cell joined over the lines it wraps onto.
std::vector<std::string> comparison_row(const std::string& text, const std::string& label, const std::string& next) {
  const size_t begin = text.find("\n" + label);
  const size_t end = text.find("\n" + next, begin + 1);
  std::vector<std::string> cells;
  std::istringstream lines(text.substr(begin + 1, end - begin - 1));
  for (std::string line; std::getline(lines, line);) {
    if (line.size() >= 2 && line.compare(line.size() - 2, 2, " |") == 0) line += ' ';  // an empty last cell
    size_t start = 0;
    for (size_t column = 0;; ++column) {
      const size_t bar = line.find(" | ", start);
      std::string cell = line.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
      while (!cell.empty() && cell.back() == ' ') cell.pop_back();
      while (!cell.empty() && cell.front() == ' ') cell.erase(cell.begin());
      if (cells.size() <= column) cells.emplace_back();
      if (!cell.empty()) cells[column] += (cells[column].empty() ? "" : " ") + cell;
      if (bar == std::string::npos) break;
      start = bar + 3;
    }
  }
  return cells;
}

TEST(EngineCommand, SeveralEnginesGiveOneTableAndOneJsonDocument) {
  auto r = run_engramlab(kTp2Dp4 + "--shm-size 200GiB --engine vllm,sglang,engramlab");
  EXPECT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(unpadded(r.text), AllOf(HasSubstr("| vllm | sglang | engramlab"),
                            HasSubstr("| host_shared | device_collective | device_collective"),
                            HasSubstr("0 -> 2^-127, 255 -> +inf"), HasSubstr("KV cache left")));
  auto all = run_engramlab(kTp2Dp4 + "--shm-size 200GiB --compare-engines");
  EXPECT_EQ(all.exit_code, 0) << all.text;
  EXPECT_THAT(unpadded(all.text), HasSubstr("| engramlab | vllm | sglang"));
  auto j = run_engramlab(kTp2Dp4 + "--shm-size 200GiB --engine vllm,sglang --json", "", "2>/dev/null");
  ASSERT_EQ(j.exit_code, 0) << j.text;
  const nlohmann::json doc = nlohmann::json::parse(j.text);
  ASSERT_EQ(doc["engines"].size(), 2u);
  EXPECT_EQ(doc["engines"][0]["engine"], "vllm");
  EXPECT_EQ(doc["engines"][0]["placement"], "host_shared");
  EXPECT_EQ(doc["engines"][1]["placement"], "device_collective");
  EXPECT_EQ(doc["engines"][1]["tp_split"], "rows");
}

// The collectives line names each engine's device group by what its
// placement cuts and how the engine brings rows back: vLLM's
// device_head_sharded splits heads over TP x its Engram DP group and
// all-gathers head slices over the Engram DP group, each rank keeping its
// own tokens (_gather_engram_rows), then heads over TP; SGLang's and
// engramlab's device_collective splits rows and reduce-scatters them.
TEST(EngineCommand, TheComparisonNamesEachDeviceGroupByWhatItsPlacementCuts) {
  const std::string device = kTp2Dp4 + "--cpu-offload=false --engine vllm,sglang ";
  auto r = run_engramlab(device);
  EXPECT_EQ(r.exit_code, 0) << r.text;
  ASSERT_NE(r.text.find("collectives/step"), std::string::npos) << r.text;
  const std::vector<std::string> collectives = comparison_row(r.text, "collectives/step", "bytes/token/step");
  ASSERT_EQ(collectives.size(), 3u) << r.text;  // the label, vllm, sglang
  const std::string& vllm = collectives[1];
  // A group is named once, after the run of collectives over it.
  EXPECT_THAT(vllm, AllOf(HasSubstr("all-gather ids; all-gather head slices, each rank keeping its own tokens "
                                    "(Engram DP group of "),
                          HasSubstr("all-gather heads over TP (TP group of 2)"), Not(HasSubstr("all-to-all")),
                          Not(HasSubstr("row shards")), Not(HasSubstr("reduce-scatter"))));
  EXPECT_THAT(collectives[2], HasSubstr("all-gather ids; reduce-scatter rows (sum) (row shards of 8)"));
  auto j = run_engramlab(device + "--json", "", "2>/dev/null");
  ASSERT_EQ(j.exit_code, 0) << j.text;
  const nlohmann::json doc = nlohmann::json::parse(j.text);
  const nlohmann::json& steps = doc["engines"][0]["collectives_per_step"];
  ASSERT_EQ(steps.size(), 3u) << steps.dump();
  EXPECT_EQ(steps[1]["name"], "all-gather head slices, each rank keeping its own tokens");
  EXPECT_THAT(steps[0]["group"].get<std::string>(), HasSubstr("Engram DP group of "));
  EXPECT_EQ(doc["engines"][1]["collectives_per_step"][1]["name"], "reduce-scatter rows (sum)");
  EXPECT_EQ(doc["engines"][1]["collectives_per_step"][1]["group"], "row shards of 8");
}

// Under sequence parallelism vLLM's main all-gathers over TP and each rank
// keeps its token slice (no fewer bytes); the all-to-all that hands each TP
// rank its own token shard alone, half the bytes per token at TP 2, is open
// PR 56435: the variant vllm+sp-all-to-all.
TEST(EngineCommand, SequenceParallelHalvesTrafficOnlyUnderTheAllToAllVariant) {
  auto r = run_engramlab(
      kTp2Dp4 + "--cpu-offload=false --sequence-parallel --engine vllm,vllm+sp-all-to-all,sglang --json", "",
      "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.text;
  const nlohmann::json doc = nlohmann::json::parse(r.text);
  EXPECT_EQ(doc["engines"][1]["engine"], "vllm+sp-all-to-all");
  const nlohmann::json& main = doc["engines"][0]["collectives_per_step"];
  EXPECT_EQ(main.back()["name"], "all-gather over TP, each rank keeping its token slice") << main.dump();
  const nlohmann::json& variant = doc["engines"][1]["collectives_per_step"];
  ASSERT_EQ(variant.size(), 2u) << variant.dump();
  EXPECT_EQ(variant[1]["name"], "all-to-all head slices of each TP rank's token shard");
  EXPECT_EQ(doc["engines"][1]["collective_bytes_per_token"].get<uint64_t>() * 2,
            doc["engines"][2]["collective_bytes_per_token"].get<uint64_t>());
  EXPECT_GT(doc["engines"][0]["collective_bytes_per_token"].get<uint64_t>(),
            doc["engines"][1]["collective_bytes_per_token"].get<uint64_t>());
}

// `engines show`: every rule with its source, the version the profile
// models, its variants; --json the same as data; bad names exit 2.
TEST(EngineCommand, EnginesShowListsEveryRuleWithItsSource) {
  auto r = run_engramlab("engines show vllm");
  ASSERT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr("engine vllm: version main: nvidia/engram.py @ 1c0e50e5"),
                            HasSubstr("rows_back: rows come back by an all-gather over the Engram DP group"),
                            HasSubstr("source: vllm-project/vllm vllm/models/deepseek_v4_1/nvidia/engram.py @ 1c0e50e5 "
                                      "(merged)"),
                            HasSubstr("vllm+sp-all-to-all"), HasSubstr("PR 56435 (open)"), HasSubstr("not counted")));
  auto j = run_engramlab("engines show sglang+numa-shared --json", "", "2>/dev/null");
  ASSERT_EQ(j.exit_code, 0) << j.text;
  const nlohmann::json doc = nlohmann::json::parse(j.text);
  EXPECT_EQ(doc["engine"], "sglang+numa-shared");
  ASSERT_GT(doc["rules"].size(), 10u);
  for (const nlohmann::json& rule : doc["rules"]) {
    EXPECT_FALSE(rule["source"]["repo"].get<std::string>().empty()) << rule.dump();
    EXPECT_FALSE(rule["source"]["path"].get<std::string>().empty()) << rule.dump();
    EXPECT_FALSE(rule["source"]["state"].get<std::string>().empty()) << rule.dump();
  }
  EXPECT_EQ(doc["host_layouts"][2]["name"], "numa_shared");
  auto bad = run_engramlab("engines show vllm+numa-shared");
  EXPECT_EQ(bad.exit_code, 2) << bad.text;
  EXPECT_THAT(bad.text, AllOf(HasSubstr("'numa-shared' is not a variant of engine vllm"),
                              HasSubstr("sglang+numa-shared"), HasSubstr("vllm+sp-all-to-all")));
  auto unknown = run_engramlab(kTp2Dp4 + "--engine sglang+nope");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.text;
  EXPECT_THAT(unknown.text, AllOf(HasSubstr("'nope' is not a variant of engine sglang"), HasSubstr("sglang+symm-mem")));
  // A setting the variant does not have.
  auto setting = run_engramlab(kTp2Dp4 + "--engine sglang+numa-shared --host-layout file");
  EXPECT_EQ(setting.exit_code, 2) << setting.text;
  EXPECT_THAT(setting.text, AllOf(HasSubstr("engine sglang+numa-shared has no host layout 'file'"),
                                  HasSubstr("shared, per_rank, numa_shared"), HasSubstr("sglang+file")));
}

// plan --explain: per decision, the rule of the engine that made it.
TEST(EngineCommand, PlanExplainNamesTheRuleOfTheEngineBehindEachDecision) {
  auto r = run_engramlab(kTp2Dp4 + "--engine vllm --dp-shared-memory false --explain");
  ASSERT_EQ(r.exit_code, 0) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr("decided by:"), HasSubstr("ranks 0-7: host_head_sharded\n    by vllm rule "
                                                                 "host_placement:"),
                            HasSubstr("by vllm rule rows_back: rows come back by an all-gather"),
                            HasSubstr("source: vllm-project/vllm vllm/models/deepseek_v4_1/nvidia/engram.py")));
  auto j = run_engramlab(kTp2Dp4 + "--engine vllm --json", "", "2>/dev/null");
  ASSERT_EQ(j.exit_code, 0) << j.text;
  const nlohmann::json doc = nlohmann::json::parse(j.text);
  ASSERT_FALSE(doc["decided_by"].empty());
  EXPECT_EQ(doc["engine"]["name"], "vllm");
  EXPECT_EQ(doc["not_counted"].size(), 2u);
  EXPECT_EQ(doc["engine_extra_bytes"], 0);
}

// Acceptance: vLLM TP2 x DP4 on one node shows all-gather traffic at the
// group size; SGLang's column names its host layouts as upstream does.
TEST(EngineCommand, CompareEnginesShowsVllmAllGatherAtTheGroupSizeAndSglangsLayouts) {
  auto r = run_engramlab("plan --tp 2 --dp 4 --hosts 1 --gpus-per-host 8 --gpu-model GB200 --compare-engines --json",
                         "", "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.text;
  const nlohmann::json doc = nlohmann::json::parse(r.text);
  const nlohmann::json& vllm = doc["engines"][1];
  ASSERT_EQ(vllm["engine"], "vllm");
  EXPECT_EQ(vllm["placement"], "host_head_sharded");  // 64 MiB /dev/shm: the fallback
  const nlohmann::json& rows = vllm["collectives_per_step"][1];
  EXPECT_EQ(rows["name"], "all-gather rows, each rank keeping its own tokens");
  EXPECT_EQ(rows["group"], "node-local DP group of 4");
  EXPECT_EQ(rows["bytes_per_token"].get<uint64_t>(), 4u * 24 * 256 * 2);
  EXPECT_EQ(doc["engines"][2]["host_layouts"], "shared, per_rank (default shared)");
  auto text = run_engramlab("plan --tp 2 --dp 4 --hosts 1 --gpus-per-host 8 --gpu-model GB200 --compare-engines");
  ASSERT_EQ(text.exit_code, 0) << text.text;
  const std::vector<std::string> collectives = comparison_row(text.text, "collectives/step", "bytes/token/step");
  ASSERT_EQ(collectives.size(), 4u) << text.text;  // the label, engramlab, vllm, sglang
  EXPECT_THAT(collectives[2], HasSubstr("all-gather rows, each rank keeping its own tokens (node-local DP group of 4)"));
  EXPECT_THAT(unpadded(text.text), HasSubstr("| shared, per_rank (default shared)"));
}

}  // namespace
}  // namespace engram
