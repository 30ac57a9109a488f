// Emulated host probe: what a rank would read from the machine it runs on
// (hostname, boot id, NVLink domain, IMEX channel device, GPUs it sees).
#pragma once

#include "core/backend/host_probe.h"
#include "sim/sim_context.h"

namespace engram::sim {

class SimHostProbe final : public HostProbe {
 public:
  SimHostProbe(const SimContext& context, int rank);
  PlacementFacts facts() override;
  // The host's RAM, its tmpfs's enforced limit and the rank's memory
  // limits, as the deployment writes them (memory_limit_per_rank: a key per
  // rank; memory_limit: a key per host entry, its container).
  MemoryFacts memory() override;
  // Its GPU's socket: GPU g of G sits on socket g * cpu_sockets / G.
  std::optional<int> gpu_numa_node() override;

 private:
  const SimContext& context_;
  int rank_;
};

}  // namespace engram::sim
