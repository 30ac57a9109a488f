// Host tables in memory shared between processes outside /dev/shm, as
// SGLang keeps its host tables: memfds (its `shared` layout) and table files
// mapped MAP_SHARED (its `file` layout). A memfd: one process creates a memfd, the other ranks of its node open it
// through /proc/<pid>/fd/<n>. That path resolves only inside the creator's
// PID namespace (in another, the pid names another process or none), so the
// placement compares namespaces before it opens. Nothing is named: a killed
// job leaves nothing behind.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/backend/host_shared_memory.h"
#include "core/base/status.h"

namespace engram {

// Where a peer opens a memfd: /proc/<pid>/fd/<fd>, pid as the creator's own
// PID namespace numbers it.
struct ProcessFdRef {
  int64_t pid = -1;
  int32_t fd = -1;
};

// The creator's writable map; its fd stays open while it lives.
class ProcessSharedMapping : public ShmMapping {
 public:
  virtual ProcessFdRef owner() const = 0;
};

class ProcessSharedMemory {
 public:
  virtual ~ProcessSharedMemory() = default;
  // This process's PID namespace as /proc/self/ns/pid names it ("pid:[4026531836]").
  virtual Result<std::string> pid_namespace() = 0;
  // memfd_create(name), sized to `bytes`, mapped shared and writable.
  virtual Result<std::unique_ptr<ProcessSharedMapping>> create(const std::string& name, uint64_t bytes) = 0;
  // open("/proc/<pid>/fd/<fd>") and map `bytes` of it shared, read-only
  // (the fd is closed once mapped). kNotFound where the path does not resolve.
  virtual Result<std::unique_ptr<ShmMapping>> open_read_only(ProcessFdRef owner, uint64_t bytes) = 0;

  // A table file on this machine (SGLang's `file` layout), in the backend's
  // table-file directory: created exclusively, sized and mapped MAP_SHARED
  // writable. Its pages are the page cache, shared by every process mapping
  // it, and not pinned.
  virtual Result<std::unique_ptr<ShmMapping>> create_file(const std::string& name, uint64_t bytes) = 0;
  // Mapped MAP_SHARED read-only, MADV_RANDOM (rows are read one by one).
  // kNotFound where there is no such file.
  virtual Result<std::unique_ptr<ShmMapping>> open_file_read_only(const std::string& name, uint64_t bytes) = 0;
  // The name goes; maps keep the pages. kNotFound where there is none.
  virtual Status remove_file(const std::string& name) = 0;
};

}  // namespace engram
