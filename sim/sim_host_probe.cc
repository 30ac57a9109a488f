#include "sim/sim_host_probe.h"

#include <algorithm>

namespace engram::sim {

SimHostProbe::SimHostProbe(const SimContext& context, int rank) : context_(context), rank_(rank) {
  ENGRAM_CHECK(rank >= 0 && rank < context.rank_count());
}

PlacementFacts SimHostProbe::facts() {
  const HostSpec& host = context_.host_of(rank_);
  const RankPlace& place = context_.place(rank_);
  PlacementFacts f;
  f.host = HostIdentity{host.name, host.boot_id};
  f.nvlink_domain = host.nvlink_domain;
  f.imex_channel = host.imex_channel;
  const bool one_visible = host.visible_gpus_per_rank == 1;
  // A container that sees one GPU calls it device 0, whatever its bus slot.
  f.gpu_ordinal = one_visible ? 0 : place.gpu;
  f.visible_gpu_count = host.visible_gpus_per_rank > 0 ? host.visible_gpus_per_rank : host.gpu_count;
  f.environment = host.environment;
  return f;
}

MemoryFacts SimHostProbe::memory() {
  const HostSpec& host = context_.host_of(rank_);
  MemoryFacts m;
  m.host_memory_bytes = host.host_memory_bytes;
  m.tmpfs_bytes_enforced = host.tmpfs_bytes_enforced;
  // Keys: one per rank for a rank's own limit (top bit), one per host entry for its container's (the next bit).
  if (host.memory_limit_bytes_per_rank)
    m.limits[0] = {(uint64_t{1} << 63) | static_cast<uint64_t>(rank_ + 1), *host.memory_limit_bytes_per_rank};
  // A container's (the host entry's) limit: one key for all its ranks.
  if (host.memory_limit_bytes)
    m.limits[1] = {(uint64_t{1} << 62) | static_cast<uint64_t>(context_.place(rank_).host + 1), *host.memory_limit_bytes};
  return m;
}

std::optional<int> SimHostProbe::gpu_numa_node() {
  return engram::gpu_numa_node(context_.host_of(rank_), context_.place(rank_).gpu);
}

}  // namespace engram::sim
