// `engramlab scenario rank FILE`: one real rank of a scenario, run by every
// process under `engramlab launch -n N` (or torchrun/srun). It builds the
// real RankBackend from the launcher's environment (plus GPU LOCAL_RANK when
// the scenario places the rank on the device: backends/ranks/rank_device.h), runs the same rank body
// as the emulator (harness/scenario_rank.h) and writes one JSON line
// (harness/scenario_rank_record.h) to <result_dir>/rank-<r>.json, or to stdout.
#pragma once

#include <string>

namespace engram::harness {

struct ScenarioRankFlags {
  std::string file;
  std::string result_dir;  // empty: stdout
  int die_rank = -1;       // crash tests: this rank SIGKILLs itself at `die_at`
  std::string die_at;      // "shm_create:N" | "shm_open:N"
};

// 0 when the rank succeeded; 1 when it failed (its record says why); 2 when
// it could not even learn its rank or write its record.
int run_scenario_rank_process(const ScenarioRankFlags& flags);

std::string rank_result_path(const std::string& result_dir, int rank);

}  // namespace engram::harness
