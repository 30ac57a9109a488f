// Emulated memfds opened through /proc/<pid>/fd (SGLang's shared host
// table), and table files (its file layout): a file is seen by every rank of
// its machine (hostname + boot id) by name until removed. Each rank has a pid and a PID namespace from its host entry
// (hosts[].pid_namespace): one for the entry's ranks, or one per rank, where
// every rank is pid 1 of its own container. A path resolves, as the kernel
// resolves it, only on the creator's machine, inside the creator's PID
// namespace, while the creator's fd is open: elsewhere it is "No such file
// or directory" (or, in a namespace of its own, a pid that names another process).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/process_shared_memory.h"
#include "sim/sim_context.h"

namespace engram::sim {

class MemfdWorld {
 public:
  explicit MemfdWorld(SimContext& context);
  ~MemfdWorld();

  std::string pid_namespace_of(int rank) const;  // "pid:[h200-0]", "pid:[h200-0 rank 3]"
  int64_t pid_of(int rank) const;                // 1000 + rank; 1 in a namespace of its own
  size_t open_memfd_count() const;               // memfds whose creator's fd is still open

  struct Memfd;

 private:
  SimContext& context_;
  std::vector<std::shared_ptr<Memfd>> memfds_;  // open creators' fds
  std::vector<int32_t> next_fd_by_rank_;
  std::map<std::string, std::shared_ptr<Memfd>> files_;  // by machine identity + name

  friend class SimProcessSharedMemory;
};

class SimProcessSharedMemory final : public ProcessSharedMemory {
 public:
  SimProcessSharedMemory(MemfdWorld& world, int rank);
  Result<std::string> pid_namespace() override;
  Result<std::unique_ptr<ProcessSharedMapping>> create(const std::string& name, uint64_t bytes) override;
  Result<std::unique_ptr<ShmMapping>> open_read_only(ProcessFdRef owner, uint64_t bytes) override;
  Result<std::unique_ptr<ShmMapping>> create_file(const std::string& name, uint64_t bytes) override;
  Result<std::unique_ptr<ShmMapping>> open_file_read_only(const std::string& name, uint64_t bytes) override;
  Status remove_file(const std::string& name) override;

 private:
  std::string file_key(const std::string& name) const;  // machine identity + name
  MemfdWorld& world_;
  int rank_;
};

}  // namespace engram::sim
