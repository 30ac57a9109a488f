// ProcessSharedMemory on the real machine: memfd_create, and peers open the
// creator's fd through /proc/<pid>/fd/<n> (SGLang's `shared` host table).
// The kernel lets a process open another's fd there when it may ptrace it
// (same user, Yama scope 0/1 for non-descendants aside) and sees its pid,
// i.e. shares its PID namespace or sits above it.
#pragma once

#include <string>

#include "core/backend/process_shared_memory.h"

namespace engram::memfd {

class ProcFdSharedMemory final : public ProcessSharedMemory {
 public:
  // `table_file_dir`: where table files go (real ranks: /tmp, the default; tests give a directory of their own).
  explicit ProcFdSharedMemory(std::string table_file_dir = "/tmp") : table_file_dir_(std::move(table_file_dir)) {}
  Result<std::string> pid_namespace() override;
  Result<std::unique_ptr<ProcessSharedMapping>> create(const std::string& name, uint64_t bytes) override;
  Result<std::unique_ptr<ShmMapping>> open_read_only(ProcessFdRef owner, uint64_t bytes) override;
  Result<std::unique_ptr<ShmMapping>> create_file(const std::string& name, uint64_t bytes) override;
  Result<std::unique_ptr<ShmMapping>> open_file_read_only(const std::string& name, uint64_t bytes) override;
  Status remove_file(const std::string& name) override;

 private:
  Result<std::string> path_of(const std::string& name) const;
  std::string table_file_dir_;
};

}  // namespace engram::memfd
