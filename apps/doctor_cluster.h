// `doctor` under a launcher (RANK/WORLD_SIZE and the like set: the launchers
// of backends/ipc/launch_env.h): every rank reads its own host
// (apps/observed_host_here.h, its own GPU only), the facts meet over the
// job's TCP rendezvous (the one every launched rank uses), and rank 0 prints
// one table, a row per host, and the cluster's `hosts:` entries as a
// deployment file would hold them; with --file, every host's facts against
// the file, each difference once.
#pragma once

#include <optional>

#include "apps/deployment_bridge.h"
#include "apps/observed_host_here.h"
#include "backends/ipc/launch_env.h"
#include "core/deployment/observed_host.h"

namespace engram::app {

// The job `doctor` runs in: the launcher's environment where one started it
// (RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID set) with more than one rank,
// and not `local`; nullopt otherwise. invalid_argument for a launcher
// environment that cannot be read, naming --local.
Result<std::optional<ipc::LaunchEnv>> doctor_launch_env(bool local);
// How doctor reads its host: the directory a real run uses for /dev/shm
// (ENGRAMLAB_SHM_DIR); on its own every GPU, in a job LOCAL_RANK's.
Result<ObserveOptions> doctor_observe_options(const std::optional<ipc::LaunchEnv>& env);

struct DoctorClusterOptions {
  bool json = false;          // one document per rank (rank 0's holds the cluster)
  bool yaml_only = false;     // --emit-host: rank 0 prints the hosts: YAML alone
  const DeploymentBridge* bridge = nullptr;  // --file
};

// The exit code: 0, 1 when the file differs or a step failed (every rank
// alike), 2 for a launcher environment that cannot be read.
int run_doctor_cluster(const ipc::LaunchEnv& env, const ObservedHost& mine, const DoctorClusterOptions& options);

}  // namespace engram::app
