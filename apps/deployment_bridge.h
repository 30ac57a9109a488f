// The bridge from a deployment file to the cluster a command runs on:
// `--file deployment.yaml` (and `--host-map REAL=FILE,...`) on `doctor`,
// `acceptance` and `bench`. Each process finds its host in the file by
// hostname and compares the real facts with what the file states
// (core/deployment_file/host_comparison.h) before anything is built; for
// `acceptance` and `bench` the file also gives the model, layout and config
// the ranks run, and after the runtime starts each rank compares the
// placement and handle type it chose with what `plan` of the file says
// (core/plan/planned_rank.h). Exit codes the commands give: 1 for any
// difference, 2 for a file or flag that cannot be read.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "apps/launched_rank.h"
#include "apps/observed_host_here.h"
#include "backends/ipc/launch_env.h"
#include "core/backend/collectives.h"
#include "core/base/json_output.h"
#include "core/base/status.h"
#include "core/deployment_file/deployment_as_written.h"
#include "core/deployment_file/host_comparison.h"
#include "core/plan/deployment_plan.h"
#include "core/runtime/engram_runtime.h"

namespace engram::app {

struct BridgeFlags {
  std::string file;
  std::string host_map;
};

// Adds --file and --host-map; `gives` says what the file supplies besides
// the hosts ("the model, layout and config the ranks run").
void add_bridge_flags(CLI::App& cmd, BridgeFlags& flags, const std::string& gives);

struct DeploymentBridge {
  DeploymentAsWritten file;
  HostMap host_map;
  std::vector<int> rank_hosts;  // the file's rank -> host index, resolved
};

// nullopt without --file. invalid_argument for a file the parser refuses,
// one whose layout its hosts cannot hold, a bad --host-map or a bad
// ENGRAMLAB_ENGINE. The engine `engramlab launch --engine` handed the job
// (ENGRAMLAB_ENGINE) replaces the file's engine.name (apps/engine_choice.h).
Result<std::optional<DeploymentBridge>> load_bridge(const BridgeFlags& flags);

// A flag that says what the file already says, so it is refused beside --file.
struct FlagTheFileGives {
  const char* flag;
  const char* file_field;
};
// invalid_argument naming the first such flag `cmd` was given.
Status refuse_flags_beside_file(const CLI::App& cmd, std::span<const FlagTheFileGives> flags);

// One process against the file, before anything starts.
struct FileCheck {
  int host_index = -1;          // its entry; -1 where the host is not in the file
  FactsComparison comparison;   // differences and fields not checked
  Status error;                 // the host is not in the file
  bool passed() const { return error.is_ok() && comparison.differences.empty(); }
};
// `rank` and `world_size` of a launched job (world size compared with the
// file's tp x dp when `check_world_size`), or rank -1 for a process on its own.
FileCheck check_against_file(const DeploymentBridge& bridge, int rank, int world_size, bool check_world_size,
                             const ObservedHost& here);

// "<who>differs from dep.yaml: <line>" for each difference (and the
// unknown host's error), "<who><field>: not checked: ..." after, "<who>matches
// dep.yaml: ..." when nothing differs. `who` is "rank 1: " or "".
void print_file_check(std::FILE* to, const std::string& who, const DeploymentBridge& bridge, const FileCheck& check);

// {"file", "host", "differences", "not_checked"} (null without --file).
Json file_check_json(const DeploymentBridge* bridge, const FileCheck* check, std::span<const std::string> more = {});

// Collective over `world`, before any table is built: every rank learns
// whose facts differ, and all fail alike (failed_precondition naming those
// ranks) rather than some waiting on peers that gave up.
Status agree_on_file_check(Collectives& world, const FileCheck& mine, const std::string& file);

// What the file gives a launched rank: the model (its tables unless
// --table-model), layout and config; job id and fill seed as the flags say.
Result<RuntimeOptions> runtime_options_from_file(const DeploymentBridge& bridge, const LaunchedRankFlags& flags,
                                                 const ipc::LaunchEnv& env);
// The file's ranks_per_gpu for the rank's host (1 where the host is unknown).
int ranks_per_gpu_from_file(const DeploymentBridge& bridge, const FileCheck& check);
// `plan` of the file as written: invalid_argument (exit 2) or
// failed_precondition (the file cannot work as asked: exit 1).
Result<PlanResult> plan_of_file(const DeploymentBridge& bridge);

// How a launched rank reads its host: the shm directory the real backend
// uses (ENGRAMLAB_SHM_DIR) and one GPU, LOCAL_RANK's (wrapping over the
// visible ones: ranks sharing GPUs see the same kind of GPU).
Result<ObserveOptions> launched_rank_observe_options(const ipc::LaunchEnv& env);

}  // namespace engram::app
