// `doctor --engine` and `launch --engine` (apps/engine_choice.h): each judges
// by the chosen engine's profile, the flag over the launcher's
// ENGRAMLAB_ENGINE over the deployment file's engine.name. The layouts pin
// where vLLM and engramlab disagree: vLLM refuses head shards that leave the
// last shard without a head (tiny's 4 heads over TP 3: 2, 2, 0; its Engram
// embedding asserts it, vllm/models/deepseek_v4_1/common/engram.py), where
// engramlab's row shards take any tp; and vLLM's cpu_offload defaults on
// (EngramConfig.cpu_offload = True, PR 57937) where engramlab's is off.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/engramlab_command.h"
#include "tests/temp_dir.h"
#include "tests/golden_messages.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_engramlab;
using testing::TempDir;

// doctor on its own (no launcher, no GPU, no engine handed down), whatever this machine has.
testing::CommandOutput doctor(const std::string& args, const std::string& env = "") {
  return run_engramlab("doctor " + args, "env -u RANK -u WORLD_SIZE -u ENGRAMLAB_ENGINE CUDA_VISIBLE_DEVICES= " + env);
}

testing::CommandOutput launch(const std::string& args) {
  return run_engramlab("launch " + args, "env -u ENGRAMLAB_ENGINE");
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A one-host deployment file of the tiny model.
std::string write_file(const TempDir& dir, const std::string& name, int tp, int dp, const std::string& engine = "") {
  const std::string path = dir.path + "/" + name;
  std::ofstream(path) << "model: tiny\nhosts:\n  - name: node0\n    gpus: " << tp * dp << "\nlayout:\n  tp: " << tp
                      << "\n  dp: " << dp << "\n"
                      << (engine.empty() ? "" : "engine:\n  name: " + engine + "\n");
  return path;
}

TEST(EngineDoctor, VllmRefusesTp3OfFourHeadsInItsWordsWhereEngramlabBuildsRowShards) {
  auto ours = doctor("--model tiny --tp 3");
  EXPECT_EQ(ours.exit_code, 0) << ours.text;
  EXPECT_THAT(ours.text, AllOf(HasSubstr("engine engramlab here (model tiny, tp 3"),
                               HasSubstr("its defaults: device_collective"), HasSubstr("host layout auto: host_private"),
                               Not(HasSubstr("refuses it"))));
  auto vllm = doctor("--model tiny --tp 3 --engine vllm");
  EXPECT_EQ(vllm.exit_code, 0) << vllm.text;  // a report: a refusal is a finding
  EXPECT_THAT(vllm.text,
              AllOf(HasSubstr("engine vllm here (model tiny, tp 3"),
                    HasSubstr("its defaults: refused: layout.tp (3): engine vllm refuses it: Engram sharding leaves "
                              "ranks without hash heads: 4 heads over 3 shards (TP 3)"),
                    HasSubstr("host_private: cannot here: layout.tp (3): engine vllm refuses it"),
                    HasSubstr("device_head_sharded: cannot here: layout.tp (3): engine vllm refuses it"),
                    HasSubstr("placements here (model tiny, tables 0.001 GiB, tp 3, engine vllm)")));
}

TEST(EngineDoctor, EachEnginesDefaultsAndHostLayoutsAreItsOwnInTextAndJson) {
  auto j = doctor("--model tiny --engine vllm --json", "");
  ASSERT_EQ(j.exit_code, 0) << j.text;
  const nlohmann::json vllm = nlohmann::json::parse(j.text.substr(j.text.find('{')));
  EXPECT_EQ(vllm["engine"]["name"], "vllm");
  const nlohmann::json& builds = vllm["engine"]["builds"];
  ASSERT_EQ(builds.size(), 3u) << builds.dump();  // defaults, cpu_offload: false, host layout auto
  EXPECT_EQ(builds[0]["asked"], "its defaults");
  EXPECT_EQ(builds[0]["placement"], "host_head_sharded");  // cpu_offload on by default, no private copies
  EXPECT_THAT(builds[0]["verdict"].get<std::string>(), HasSubstr("engine vllm's default (EngramConfig.cpu_offload = True"));
  EXPECT_EQ(builds[1]["placement"], "device_head_sharded");
  EXPECT_EQ(builds[2]["asked"], "host layout auto");

  auto ours = doctor("--model tiny --json");
  ASSERT_EQ(ours.exit_code, 0) << ours.text;
  const nlohmann::json engramlab = nlohmann::json::parse(ours.text.substr(ours.text.find('{')));
  EXPECT_EQ(engramlab["engine"]["name"], "engramlab");
  EXPECT_EQ(engramlab["engine"]["builds"][0]["placement"], "device_collective");  // off by default
  EXPECT_THAT(engramlab["engine"]["builds"][0]["verdict"].get<std::string>(), Not(HasSubstr("cpu_offload")));

  auto sglang = doctor("--model tiny --engine sglang");
  EXPECT_EQ(sglang.exit_code, 0) << sglang.text;
  // SGLang main's host layouts are `shared` and `per_rank` (numa_shared is
  // open PR 40106 and `file` a fork's: variants, core/engines/sglang_profile).
  EXPECT_THAT(sglang.text, AllOf(HasSubstr("host layout shared: sglang_shared"),
                                 HasSubstr("host layout per_rank: sglang_private"),
                                 Not(HasSubstr("host layout numa_shared")), Not(HasSubstr("host layout file"))));
}

TEST(EngineDoctor, TheFilesEngineJudgesUnlessTheFlagOrTheLauncherSaysOtherwise) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string file = write_file(dir, "vllm.yaml", 1, 2, "vllm");
  // This host is not the file's node0 (exit 1), but the report is the engine's.
  auto from_file = doctor("--model tiny --file " + file);
  EXPECT_EQ(from_file.exit_code, 1) << from_file.text;
  EXPECT_THAT(from_file.text, HasSubstr("engine vllm here"));
  auto flag = doctor("--model tiny --engine engramlab --file " + file);
  EXPECT_THAT(flag.text, AllOf(HasSubstr("engine engramlab here"), Not(HasSubstr("engine vllm here"))));
  auto handed = doctor("--model tiny --file " + file, "ENGRAMLAB_ENGINE=sglang");
  EXPECT_THAT(handed.text, HasSubstr("engine sglang here"));
}

TEST(EngineDoctor, AnUnknownEngineIsExit2NamingWhereItWasWritten) {
  auto flag = doctor("--model tiny --engine vlm");
  EXPECT_EQ(flag.exit_code, 2) << flag.text;
  EXPECT_THAT(flag.text, AllOf(HasSubstr(golden_message("engine.unknown_vlm")),
                               HasSubstr("did you mean 'vllm'?")));
  auto handed = doctor("--model tiny --json", "ENGRAMLAB_ENGINE=trtllm");
  EXPECT_EQ(handed.exit_code, 2) << handed.text;
  EXPECT_THAT(handed.text, AllOf(HasSubstr("ENGRAMLAB_ENGINE: 'trtllm' is not an engine"), HasSubstr("\"error\"")));
}

TEST(EngineLaunch, TheFileIsPlannedUnderTheEngineBeforeAnyRankStarts) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string tp3 = write_file(dir, "tp3.yaml", 3, 1);
  const std::string ranks = " -- sh -c 'echo started=$ENGRAMLAB_ENGINE'";
  auto vllm = launch("-n 3 --engine vllm --file " + tp3 + ranks);
  EXPECT_EQ(vllm.exit_code, 2) << vllm.text;
  EXPECT_THAT(vllm.text, AllOf(HasSubstr("layout.tp (3): engine vllm refuses it: Engram sharding leaves ranks without "
                                         "hash heads"),
                               Not(HasSubstr("started="))));
  auto ours = launch("-n 3 --file " + tp3 + ranks);
  EXPECT_EQ(ours.exit_code, 0) << ours.text;
  EXPECT_THAT(ours.text, HasSubstr("engine engramlab plans " + tp3 + ": ranks 0-2: device_collective"));
  EXPECT_EQ(count(ours.text, "started=engramlab"), 3u) << ours.text;

  // cpu_offload's default: vLLM's host tables, engramlab's device rows.
  const std::string dp2 = write_file(dir, "dp2.yaml", 1, 2);
  auto vllm_dp2 = launch("-n 2 --engine vllm --file " + dp2 + " -- true");
  EXPECT_EQ(vllm_dp2.exit_code, 0) << vllm_dp2.text;
  EXPECT_THAT(vllm_dp2.text, HasSubstr("engine vllm plans " + dp2 + ": ranks 0-1: host_shared"));
  auto ours_dp2 = launch("-n 2 --file " + dp2 + " -- true");
  EXPECT_THAT(ours_dp2.text, HasSubstr("engine engramlab plans " + dp2 + ": ranks 0-1: device_collective"));

  auto short_world = launch("-n 2 --file " + tp3 + ranks);
  EXPECT_EQ(short_world.exit_code, 2) << short_world.text;
  EXPECT_THAT(short_world.text, AllOf(HasSubstr("tp 3 x dp 1 = 3 ranks, and this launch starts 2"),
                                      Not(HasSubstr("started="))));
}

TEST(EngineLaunch, TheEngineIsHandedToEveryRankTheFlagOverTheFile) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string sglang = write_file(dir, "sglang.yaml", 1, 2, "sglang");
  const std::string ranks = " -- sh -c 'echo engine=$ENGRAMLAB_ENGINE'";
  auto flag = launch("-n 2 --engine vllm" + ranks);
  EXPECT_EQ(flag.exit_code, 0) << flag.text;
  EXPECT_EQ(count(flag.text, "engine=vllm"), 2u) << flag.text;
  auto file = launch("-n 2 --file " + sglang + ranks);
  EXPECT_EQ(count(file.text, "engine=sglang"), 2u) << file.text;
  auto over = launch("-n 2 --engine engramlab --file " + sglang + ranks);
  EXPECT_EQ(count(over.text, "engine=engramlab"), 2u) << over.text;
}

// The ranks' own commands plan by the engine launch hands them: acceptance
// --file plans the file on every rank before it builds anything.
TEST(EngineLaunch, RanksPlanByTheEngineTheLauncherHandsThem) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string tp3 = write_file(dir, "tp3.yaml", 3, 1);
  const std::string acceptance = " -- " + testing::engramlab_path() + " acceptance --file " + tp3;
  auto vllm = launch("-n 3 --engine vllm" + acceptance);
  EXPECT_EQ(vllm.exit_code, 2) << vllm.text;
  EXPECT_THAT(vllm.text, HasSubstr("plan of " + tp3 + ": layout.tp (3): engine vllm refuses it"));
  // engramlab plans it and goes on to find this host is not the file's node0.
  auto ours = launch("-n 3" + acceptance);
  EXPECT_EQ(ours.exit_code, 1) << ours.text;
  EXPECT_THAT(ours.text, AllOf(HasSubstr("host not in the file"), Not(HasSubstr("refuses it"))));
}

TEST(EngineLaunch, AnUnknownEngineIsExit2AndStartsNothing) {
  auto r = launch("-n 2 --engine vlm -- sh -c 'echo started'");
  EXPECT_EQ(r.exit_code, 2) << r.text;
  EXPECT_THAT(r.text, AllOf(HasSubstr(golden_message("engine.unknown_vlm")),
                            HasSubstr("did you mean 'vllm'?"), Not(HasSubstr("started"))));
}

}  // namespace
}  // namespace engram
