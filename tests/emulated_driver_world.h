// Running real ranks over the emulated CUDA driver: a deployment's world file
// in a temp dir, and ranks of tests/emulated_rank_worker_main.cc started by
// `engramlab launch --emulated-world` with the environment a launcher gives
// them (RANK, LOCAL_RANK of their emulated host, the rendezvous, the job
// token) plus the driver's library path and world file.
#pragma once

#include <fmt/format.h>

#include <fstream>
#include <string>
#include <vector>

#include "backends/emulated_driver/world_file.h"
#include "core/deployment/deployment_validate.h"
#include "core/deployment_file/deployment_yaml.h"
#include "tests/process_run.h"
#include "tests/temp_dir.h"

namespace engram::testing {

struct EmulatedWorld {
  TempDir dir{"/tmp/engramlab-emuworld"};
  Deployment deployment;
  std::string world_path;
};

// `yaml`: a deployment (hosts, layout). Faults are armed in the world file.
inline Result<std::unique_ptr<EmulatedWorld>> make_emulated_world(const std::string& yaml,
                                                                  const std::vector<emulated::WorldFault>& faults = {}) {
  auto w = std::make_unique<EmulatedWorld>();
  ENGRAM_ASSIGN_OR_RETURN(const Deployment parsed, parse_deployment_text(yaml, "test deployment"));
  ENGRAM_ASSIGN_OR_RETURN(w->deployment, validate_and_complete(parsed));
  ENGRAM_ASSIGN_OR_RETURN(const std::string text, emulated::world_file_text(w->deployment, faults));
  w->world_path = w->dir.path + "/world";
  std::ofstream(w->world_path) << text;
  return w;
}

inline std::string emulated_driver_env(const EmulatedWorld& w) {
  return fmt::format("LD_LIBRARY_PATH={} ENGRAMLAB_EMULATED_WORLD={}", ENGRAM_EMULATED_DRIVER_LIB_DIR, w.world_path);
}

// Every rank of the world's deployment running `worker_args`, started by
// `engramlab launch --emulated-world` as a job on this host (each rank with
// the environment a launcher on its emulated host gives it, the launcher
// owning the rendezvous port); their output (each line as they print it,
// the launcher's own lines beside) and the launcher's exit code.
inline ProcessRun run_emulated_ranks(const EmulatedWorld& w, const std::string& worker_args) {
  const std::string job = fmt::format("emutest-{}-{}", ::getpid(), w.dir.path.substr(w.dir.path.size() - 6));
  return run(fmt::format("{0}/apps/engramlab launch --no-rank-prefix --job-id {1} --emulated-world {2} -- "
                         "{0}/tests/emulated_rank_worker {3}",
                         ENGRAM_BINARY_DIR, job, w.world_path, worker_args));
}

}  // namespace engram::testing
