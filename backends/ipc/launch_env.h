// Who am I in the job: the launcher's environment (engramlab launch and
// torchrun set RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT; Slurm sets
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID), plus the job's token and id.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/base/status.h"

namespace engram::ipc {

struct LaunchEnv {
  int rank = -1;
  int world_size = 0;
  int local_rank = -1;
  std::string master_addr;
  uint16_t master_port = 0;
  std::string job_token;  // shared secret of this job's ranks
  std::string job_id;     // names sockets and shm segments: [A-Za-z0-9._-]
  std::string launcher;   // "torchrun-style" or "slurm", for messages
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// getenv, as an EnvLookup.
EnvLookup process_env();

// Missing or contradictory values are kInvalidArgument naming the variable
// and the fix.
Result<LaunchEnv> read_launch_env(const EnvLookup& env);

// A job id is safe inside file names and segment names.
Status check_job_id(const std::string& job_id, const std::string& where);

}  // namespace engram::ipc
