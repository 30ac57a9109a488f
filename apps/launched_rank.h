// What a command run by every process of a launched job (one per GPU, under
// `engramlab launch -n N`, torchrun or srun) needs to start its rank: the
// runtime flags such commands share (model, table model, layout, shard group,
// fill seed), read into RuntimeOptions, and the rank's real backend with its
// own GPU opened. Used by `acceptance` and `bench`.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <utility>

#include "backends/ipc/launch_env.h"
#include "core/backend/rank_backend.h"
#include "core/base/status.h"
#include "core/base/warnings.h"
#include "core/runtime/engram_runtime.h"

namespace engram::app {

struct LaunchedRankFlags {
  // The command's defaults for --tp and --dp.
  LaunchedRankFlags(std::string tp_default, std::string dp_default)
      : tp_text(std::move(tp_default)), dp_text(std::move(dp_default)) {}
  std::string model = "deepseek-v4.1-flash";
  std::string table_model;  // empty: the model itself
  std::string shard_group = "world";
  std::string placement;  // "": the rules decide
  // Whole numbers are read from the text as typed (apps/flag_numbers.h); a
  // 0 for tp or dp is WORLD_SIZE divided by the other.
  std::string tp_text;
  std::string dp_text;
  std::string fill_seed_text = "1";
  // Ranks that share one GPU: LOCAL_RANK r opens GPU r / ranks_per_gpu.
  // Only where asked (a one-GPU machine running the real multi-process
  // exchange); the plan then refuses placements that need a GPU per rank.
  std::string ranks_per_gpu_text = "1";
  std::string engine;  // whose rules plan the ranks (core/engines/); "": apps/engine_choice.h's order
};

// Adds --model, --table-model, --tp, --dp, --shard-group, --fill-seed,
// --ranks-per-gpu and --engine.
void add_launched_rank_flags(CLI::App& cmd, LaunchedRankFlags& flags);

// invalid_argument naming the flag, the value and the fix.
Result<RuntimeOptions> runtime_options_from(const LaunchedRankFlags& flags, const ipc::LaunchEnv& env);
Result<int> ranks_per_gpu_from(const LaunchedRankFlags& flags);

// Creates the rank's real backend from the process environment, opens its GPU
// (LOCAL_RANK / ranks_per_gpu; none where none is visible: `body` then sees
// no compute), and runs `body`. Stale-segment warnings go to `sink`.
Status run_launched_rank(const ipc::LaunchEnv& env, int ranks_per_gpu, WarningSink& sink,
                         const std::function<Status(RankBackend&)>& body);

}  // namespace engram::app
