// Emulated /dev/shm: one namespace of segment names per host identity,
// bounded by the host's tmpfs total (ENOSPC beyond it), absent where the host
// has no /dev/shm mounted. Segments outlive their creator until unlinked, as
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
  explicit ShmWorld(SimContext& context);
  ~ShmWorld();

  struct Tmpfs;  // one host's accounting
  struct Segment;
  struct MappingRecord;

  // What the OS does to a dying process: its mappings go; segments stay.
  void release_process(int rank);
  uint64_t used_bytes(int host) const;
  size_t segment_count(int host) const;

 private:
  SimContext& context_;
  std::vector<std::shared_ptr<Tmpfs>> tmpfs_by_host_;  // by host index; same identity shares one
  std::vector<std::vector<std::shared_ptr<MappingRecord>>> mappings_by_rank_;

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
  std::unique_ptr<ShmMapping> map_segment(std::shared_ptr<ShmWorld::Segment> segment, uint64_t bytes, bool writable);

  ShmWorld& world_;
  SimContext& context_;
  int rank_;
};

}  // namespace engram::sim
