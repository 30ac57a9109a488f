// `engramlab launch --emulate-driver dep.yaml`: every rank of the job runs over
// the emulated CUDA driver and NVML (backends/emulated_driver) as the rank of
// the deployment's world it is: the world file is written from the
// deployment into a directory of the job (removed with it), and each rank gets
// LD_LIBRARY_PATH with the emulated libcuda.so.1 / libnvidia-ml.so.1 first,
// ENGRAMLAB_EMULATED_WORLD, and the LOCAL_RANK / LOCAL_WORLD_SIZE of its
// emulated host (what a launcher on that host would give it).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace engram::app {

struct EmulatedDriverJob {
  std::string dir;         // holds the world file; removed when the job ends (empty: not ours)
  std::string world_path;
  std::string lib_dir;     // the emulated libraries
  std::vector<std::pair<int, int>> local;  // per rank: LOCAL_RANK, LOCAL_WORLD_SIZE
};

// Errors: the deployment's own (invalid_argument naming the field), or
// failed_precondition when this build has no emulated driver (no cuda.h) or
// its libraries are missing (ENGRAMLAB_EMULATED_DRIVER_LIB overrides where).
Result<EmulatedDriverJob> prepare_emulated_driver(const std::string& deployment_path);

// A job over a world file someone else wrote and removes (`scenario run
// --real --emulate-driver` writes one into its result directory): `dir` is
// left empty. failed_precondition as above, or when the file cannot be read;
// invalid_argument naming the line when it does not parse.
Result<EmulatedDriverJob> emulated_driver_job_for_world(const std::string& world_path);

// What rank `rank` gets on top of the launcher's environment.
std::vector<std::pair<std::string, std::string>> emulated_driver_environment(const EmulatedDriverJob& job, int rank);

void remove_emulated_driver_job(const EmulatedDriverJob& job);

}  // namespace engram::app
