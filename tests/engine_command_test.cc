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

namespace engram {
namespace {

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
  EXPECT_THAT(r.text, HasSubstr("did you mean 'sglang'?"));
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
                            HasSubstr("config.cpu_offload: true (engine vllm's default"), HasSubstr("VLLM_PLE_CPU_OFFLOAD"),
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
                            HasSubstr("0 -> 2^-127, 255 -> NaN"), HasSubstr("KV cache left")));
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
// placement cuts (core/placements: PlacementOps::group_text,
// rows_back_collective): vLLM's device_head_sharded splits heads and trades
// head slices back all-to-all; SGLang's and engramlab's device_collective
// splits rows and reduce-scatters them.
TEST(EngineCommand, TheComparisonNamesEachDeviceGroupByWhatItsPlacementCuts) {
  const std::string device = kTp2Dp4 + "--cpu-offload=false --engine vllm,sglang ";
  auto r = run_engramlab(device);
  EXPECT_EQ(r.exit_code, 0) << r.text;
  ASSERT_NE(r.text.find("collectives/step"), std::string::npos) << r.text;
  const std::vector<std::string> collectives = comparison_row(r.text, "collectives/step", "bytes/token/step");
  ASSERT_EQ(collectives.size(), 3u) << r.text;  // the label, vllm, sglang
  const std::string& vllm = collectives[1];
  EXPECT_THAT(vllm, AllOf(HasSubstr("all-gather ids (head slices of "), HasSubstr("all-to-all head slices (head slices"),
                          Not(HasSubstr("row shards")), Not(HasSubstr("reduce-scatter"))));
  EXPECT_THAT(collectives[2], AllOf(HasSubstr("all-gather ids (row shards of 8)"),
                                    HasSubstr("reduce-scatter rows (sum) (row shards of 8)")));
  auto j = run_engramlab(device + "--json", "", "2>/dev/null");
  ASSERT_EQ(j.exit_code, 0) << j.text;
  const nlohmann::json doc = nlohmann::json::parse(j.text);
  const nlohmann::json& steps = doc["engines"][0]["collectives_per_step"];
  ASSERT_EQ(steps.size(), 2u) << steps.dump();
  EXPECT_EQ(steps[1]["name"], "all-to-all head slices");
  EXPECT_THAT(steps[0]["group"].get<std::string>(), HasSubstr("head slices of "));
  EXPECT_EQ(doc["engines"][1]["collectives_per_step"][1]["name"], "reduce-scatter rows (sum)");
  EXPECT_EQ(doc["engines"][1]["collectives_per_step"][1]["group"], "row shards of 8");
}

// Under sequence parallelism vLLM's head slices come back to each TP rank
// for its own token shard alone (device_head_sharded trades token shards):
// half the bytes per token at TP 2; SGLang's row shards are unchanged.
TEST(EngineCommand, SequenceParallelHalvesVllmsDeviceTrafficAtTp2) {
  auto r = run_engramlab(kTp2Dp4 + "--cpu-offload=false --sequence-parallel --engine vllm,sglang --json", "",
                         "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.text;
  const nlohmann::json doc = nlohmann::json::parse(r.text);
  const nlohmann::json& vllm = doc["engines"][0]["collectives_per_step"];
  ASSERT_EQ(vllm.size(), 2u) << vllm.dump();
  EXPECT_EQ(vllm[1]["name"], "all-to-all head slices of each TP rank's token shard");
  EXPECT_EQ(doc["engines"][0]["collective_bytes_per_token"].get<uint64_t>() * 2,
            doc["engines"][1]["collective_bytes_per_token"].get<uint64_t>());
}

}  // namespace
}  // namespace engram
