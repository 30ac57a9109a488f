// Running real ranks over the emulated CUDA driver: a deployment's world file
// in a temp dir, and ranks of tests/emulated_rank_worker_main.cc started with
// the environment a launcher gives them (RANK, LOCAL_RANK of their emulated
// host, the rendezvous, the job token) plus the driver's library path and
// world file.
#pragma once

#include <fmt/format.h>

#include <fstream>
#include <string>
#include <vector>

#include "backends/emulated_driver/world_file.h"
#include "core/deployment/deployment_validate.h"
#include "core/deployment_file/deployment_yaml.h"
#include "tests/forked_tcp_ranks.h"
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

// Every rank of the world's deployment running `worker_args`, in the
// background of one shell; their output (each line as they print it) and the
// first failing exit code.
inline ProcessRun run_emulated_ranks(const EmulatedWorld& w, const std::string& worker_args) {
  const auto places = emulated::local_places(w.deployment.rank_hosts);
  const int world = static_cast<int>(places.size());
  const std::string job = fmt::format("emutest-{}-{}", ::getpid(), w.dir.path.substr(w.dir.path.size() - 6));
  // The ranks are separate processes started by a shell, so the listening
  // socket cannot be handed to rank 0 (as forked_rank_options does): the
  // port is released just before they start (the released-port pattern,
  // left here for this one shell-started job).
  LoopbackListener listener;
  const uint16_t port = listener.port();
  listener.close();
  std::string script = "fail=0; pids=; ";
  for (int r = 0; r < world; ++r) {
    script += fmt::format(
        "RANK={} WORLD_SIZE={} LOCAL_RANK={} LOCAL_WORLD_SIZE={} MASTER_ADDR=127.0.0.1 MASTER_PORT={} "
        "ENGRAMLAB_JOB_TOKEN=emulated-driver-test-token ENGRAMLAB_JOB_ID={} {} {}/tests/emulated_rank_worker {} & "
        "pids=\"$pids $!\"; ",
        r, world, places[static_cast<size_t>(r)].local_rank, places[static_cast<size_t>(r)].local_world_size, port,
        job, emulated_driver_env(w), ENGRAM_BINARY_DIR, worker_args);
  }
  script += "for p in $pids; do wait $p || fail=$?; done; exit $fail";
  return run("sh -c '" + script + "'");
}

}  // namespace engram::testing
