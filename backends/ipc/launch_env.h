// Who am I in the job, and where do the ranks meet: read from the
// environment of whichever launcher started this process.
//
//   torchrun       RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR
//                  MASTER_PORT TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE
//   engramlab launch, or any torchrun-style environment: the same, no TORCHELASTIC_*
//   Open MPI       OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}, PMIX_NAMESPACE
//   Slurm (srun)   SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_JOB_ID
//                  SLURM_STEP_ID SLURM_STEP_NODELIST
// In that order: a torchrun or mpirun started inside a Slurm allocation
// inherits the batch step's SLURM_* variables, which describe the wrong task.
//
// The rendezvous port: torchrun's agent serves its own store on MASTER_PORT
// (TORCHELASTIC_USE_AGENT_STORE=True), so there engramlab's rank 0 listens on
// MASTER_PORT + 1 instead; srun and mpirun give no port, so one is derived
// from the job's id (the same on every rank). ENGRAMLAB_MASTER_PORT overrides
// all of it; MASTER_ADDR overrides the address (Slurm: the first host of the
// step's node list; Open MPI on one host: 127.0.0.1).
//
// Every rank needs the same ENGRAMLAB_JOB_TOKEN, set once before the
// launcher starts (kJobTokenLine); `engramlab launch` on one host makes one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/base/status.h"

namespace engram::ipc {

// The line users run once before srun / mpirun / torchrun (docs and errors).
inline constexpr const char* kJobTokenLine = "export ENGRAMLAB_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')";

struct LaunchEnv {
  int rank = -1;
  int world_size = 0;
  int local_rank = -1;
  int local_world_size = -1;  // -1: the launcher did not say
  std::string master_addr;    // where engramlab's rank 0 listens
  uint16_t master_port = 0;
  std::string job_token;      // shared secret of this job's ranks
  std::string job_id;         // names sockets and shm segments: [A-Za-z0-9._-]
  std::string shm_name_part;  // follows job_id in shm names: shm_name_part(job_token, job_id), job_token.h
  std::string launcher;       // "torchrun", "torchrun-style", "open mpi", "slurm"
  std::string rendezvous_source;  // how master_addr:master_port were chosen, for messages
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// getenv, as an EnvLookup.
EnvLookup process_env();

// Missing or contradictory values are kInvalidArgument naming the variable,
// the launcher and the fix.
Result<LaunchEnv> read_launch_env(const EnvLookup& env);

// ENGRAMLAB_JOB_TOKEN as found (nullopt: not set): invalid_argument with its
// length and the fix when it is missing, shorter than 16 characters or
// longer than 256 bytes (the fd channel's hello frame would refuse it).
Status check_job_token(const std::optional<std::string>& token);

// MASTER_ADDR (or --master-addr) is a host name or an IP address: letters,
// digits and . - _ : % [ ], at most 255 bytes. invalid_argument naming
// `where`, the value (escaped) and the fix otherwise.
Status check_master_addr(const std::string& addr, const std::string& where);

// A job id is safe inside file names and segment names.
Status check_job_id(const std::string& job_id, const std::string& where);

// The first host of a Slurm host list: "gpu[003-010,017],login1" -> "gpu003".
Result<std::string> first_slurm_host(const std::string& nodelist);

// A port in [20000, 32000) derived from `job_key`: the same on every rank,
// below Linux's ephemeral range (32768 up), so no outgoing connection holds it.
uint16_t derived_port(const std::string& job_key);

// `text` reduced to [A-Za-z0-9._-] (others become '-'), at most 40 chars.
std::string job_id_part(const std::string& text);

}  // namespace engram::ipc
