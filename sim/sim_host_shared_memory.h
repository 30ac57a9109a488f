// Emulated /dev/shm: one namespace of segment names per host identity,
// bounded by the host's tmpfs total (ENOSPC beyond it), absent where the host
// has no /dev/shm mounted. Containers: the pages a rank writes are charged to
// its memory cgroup; a tmpfs may enforce less than its total (a Kubernetes
// sizeLimit); the host's RAM bounds them all; a copy lives on its writer's
// socket. A fill past any of these is refused (core/backend/shm_fill_limits.h). Segments outlive their creator until unlinked, as
// files on tmpfs do; mappings are per rank and die with the process.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/host_shared_memory.h"
#include "sim/sim_context.h"

namespace engram::sim {

class ShmWorld {
 public:
  // `modelled_bytes`: segments that stand for tables bigger than their
  // bytes (name -> bytes to account), as sim/world.h's WorldSpec says.
  ShmWorld(SimContext& context, std::map<std::string, uint64_t, std::less<>> modelled_bytes = {});
  ~ShmWorld();

  struct Tmpfs;  // one host's accounting
  struct Segment;
  struct MappingRecord;

  // What the OS does to a dying process: its mappings go; segments stay.
  void release_process(int rank);
  uint64_t used_bytes(int host) const;
  size_t segment_count(int host) const;
  // Read-only maps of a host table by a rank on another socket than the copy.
  uint64_t remote_numa_maps() const { return remote_numa_maps_; }
  // The socket (NUMA node) of a rank's GPU.
  int numa_node_of(int rank) const;

 private:
  SimContext& context_;
  // /dev/shm pages each rank's memory cgroup is charged for; declared first
  // so it outlives every segment that uncharges it.
  std::vector<uint64_t> charged_bytes_by_rank_;
  std::vector<std::shared_ptr<Tmpfs>> tmpfs_by_host_;  // by host index; same identity shares one
  std::vector<std::vector<std::shared_ptr<MappingRecord>>> mappings_by_rank_;
  uint64_t remote_numa_maps_ = 0;
  std::map<std::string, uint64_t, std::less<>> modelled_bytes_;

  friend class SimHostSharedMemory;
};

class SimHostSharedMemory final : public HostSharedMemory {
 public:
  SimHostSharedMemory(ShmWorld& world, int rank);
  Result<ShmInfo> info() override;
  Result<std::unique_ptr<ShmMapping>> create(const std::string& name, uint64_t bytes) override;
  Result<std::unique_ptr<ShmMapping>> open_read_only(const std::string& name, uint64_t bytes) override;
  Status unlink(const std::string& name) override;

 private:
  Status check_mounted(const char* step) const;
  Status check_fill_limits(const ShmWorld::Tmpfs& fs, const std::string& name, uint64_t bytes) const;
  std::unique_ptr<ShmMapping> map_segment(std::shared_ptr<ShmWorld::Segment> segment, uint64_t bytes, bool writable);

  ShmWorld& world_;
  SimContext& context_;
  int rank_;
};

}  // namespace engram::sim
