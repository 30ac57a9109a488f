// The emulated world file (emulated_world.h) from a deployment: hosts with
// every GPU fact resolved by core (memory from gpu_memory or the model's
// table, VMM granularity from the GPU model, IMEX channel, FABRIC attribute,
// NVLink domain), the rank -> host map, and faults to arm.
#pragma once

#include <string>
#include <vector>

#include "backends/emulated_driver/emulated_world.h"
#include "core/base/status.h"
#include "core/deployment/deployment.h"

namespace engram::emulated {

// `deployment` as validate_and_complete leaves it (rank_hosts filled, GPU
// memory resolved). invalid_argument naming the field when a host name or
// domain cannot be written, or a GPU model is unknown.
Result<std::string> world_file_text(const Deployment& deployment, const std::vector<WorldFault>& faults = {});

// Loads `deployment_path`, validates it and writes its world file to
// `world_path` (0600).
Status write_world_file(const std::string& deployment_path, const std::string& world_path,
                        const std::vector<WorldFault>& faults = {});

// For each rank, its index among its host's ranks and the host's rank count:
// the LOCAL_RANK and LOCAL_WORLD_SIZE a launcher gives it on that host.
struct LocalPlace {
  int local_rank = 0;
  int local_world_size = 0;
};
std::vector<LocalPlace> local_places(const std::vector<int>& rank_hosts);

}  // namespace engram::emulated
