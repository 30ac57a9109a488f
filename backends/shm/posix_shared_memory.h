// HostSharedMemory on a real tmpfs (/dev/shm by default): exclusive create
// with pages reserved up front, read-only maps for co-located readers, and a
// creator record in the first page (segment_header.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "backends/ipc/signal_teardown.h"

#include "core/backend/host_shared_memory.h"

namespace engram::shm {

struct PosixSharedMemoryOptions {
  // Tests point this at a private tmpfs; shm_open(3) itself always uses /dev/shm.
  std::string root_dir = "/dev/shm";
};

// "engramlab-<job_id>-<name_part>-<table>": job-unique, so two jobs never
// collide, and unguessable by other users (the part: core/backend/host_shared_memory.h).
// A crashed job's leftovers are found by name when `table` is layer<L> or
// layer<L>-tp<T> (stale_segments.h), as every real table's is.
std::string segment_name(const std::string& job_id, std::string_view name_part, const std::string& table);

class PosixSharedMemory final : public HostSharedMemory {
 public:
  explicit PosixSharedMemory(PosixSharedMemoryOptions options = {});

  Result<ShmInfo> info() override;
  Result<std::unique_ptr<ShmMapping>> create(const std::string& name, uint64_t bytes) override;
  Result<std::unique_ptr<ShmMapping>> open_read_only(const std::string& name, uint64_t bytes) override;
  Status unlink(const std::string& name) override;

  const std::string& root_dir() const { return options_.root_dir; }
  std::string path_of(const std::string& name) const;

 private:
  Status check_name(const std::string& name) const;
  Status describe_existing(const std::string& name) const;

  PosixSharedMemoryOptions options_;
  // The segments this object created and has not unlinked: removed by the
  // termination-signal handler if one ends the process (signal_teardown.h).
  std::map<std::string, ipc::TeardownPath> owned_;
};

}  // namespace engram::shm
