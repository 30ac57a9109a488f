#include "sim/sim_process_shared_memory.h"

#include <fmt/format.h>

#include <algorithm>

namespace engram::sim {

struct MemfdWorld::Memfd {
  int owner_rank = -1;
  ProcessFdRef ref;
  std::string pid_namespace;
  std::string name;
  std::vector<std::byte> bytes;
};

namespace {

// A map of one memfd: the creator's (writable, closes its fd when it goes)
// or a reader's (read-only; keeps the pages, as a map does).
class SimMemfdMapping final : public ProcessSharedMapping {
 public:
  SimMemfdMapping(std::vector<std::shared_ptr<MemfdWorld::Memfd>>* open_fds, std::shared_ptr<MemfdWorld::Memfd> memfd,
                  std::string name, bool writable)
      : open_fds_(open_fds), memfd_(std::move(memfd)), name_(std::move(name)), writable_(writable) {}
  ~SimMemfdMapping() override {
    if (open_fds_ == nullptr) return;
    std::erase(*open_fds_, memfd_);
  }
  std::span<std::byte> bytes() override { return writable_ ? std::span<std::byte>(memfd_->bytes) : std::span<std::byte>(); }
  std::span<const std::byte> data() const override { return memfd_->bytes; }
  const std::string& name() const override { return name_; }
  ProcessFdRef owner() const override { return memfd_->ref; }

 private:
  std::vector<std::shared_ptr<MemfdWorld::Memfd>>* open_fds_;  // the creator's: its fd closes with it
  std::shared_ptr<MemfdWorld::Memfd> memfd_;
  std::string name_;
  bool writable_;
};

}  // namespace

MemfdWorld::MemfdWorld(SimContext& context)
    : context_(context), next_fd_by_rank_(static_cast<size_t>(context.rank_count()), 10) {}
MemfdWorld::~MemfdWorld() = default;

std::string MemfdWorld::pid_namespace_of(int rank) const {
  const HostSpec& host = context_.host_of(rank);
  if (host.pid_namespaces == PidNamespaces::kPerRank) return fmt::format("pid:[{} rank {}]", host.name, rank);
  return fmt::format("pid:[{} #{}]", host.name, context_.place(rank).host);
}

int64_t MemfdWorld::pid_of(int rank) const {
  return context_.host_of(rank).pid_namespaces == PidNamespaces::kPerRank ? 1 : 1000 + rank;
}

size_t MemfdWorld::open_memfd_count() const { return memfds_.size(); }

SimProcessSharedMemory::SimProcessSharedMemory(MemfdWorld& world, int rank) : world_(world), rank_(rank) {}

Result<std::string> SimProcessSharedMemory::pid_namespace() { return world_.pid_namespace_of(rank_); }

Result<std::unique_ptr<ProcessSharedMapping>> SimProcessSharedMemory::create(const std::string& name, uint64_t bytes) {
  if (world_.context_.is_dead(rank_)) return world_.context_.dead_status(rank_, "memfd_create");
  auto memfd = std::make_shared<MemfdWorld::Memfd>();
  memfd->owner_rank = rank_;
  memfd->ref = {world_.pid_of(rank_), world_.next_fd_by_rank_[static_cast<size_t>(rank_)]++};
  memfd->pid_namespace = world_.pid_namespace_of(rank_);
  memfd->name = name;
  memfd->bytes.resize(bytes);
  world_.memfds_.push_back(memfd);
  return std::unique_ptr<ProcessSharedMapping>(
      std::make_unique<SimMemfdMapping>(&world_.memfds_, std::move(memfd), name, true));
}

Result<std::unique_ptr<ShmMapping>> SimProcessSharedMemory::open_read_only(ProcessFdRef owner, uint64_t bytes) {
  if (world_.context_.is_dead(rank_)) return world_.context_.dead_status(rank_, "memfd_open");
  const std::string path = fmt::format("/proc/{}/fd/{}", owner.pid, owner.fd);
  const std::string here = world_.pid_namespace_of(rank_);
  // What /proc shows here: the fds of processes of this machine and this PID namespace.
  auto it = std::find_if(world_.memfds_.begin(), world_.memfds_.end(), [&](const auto& m) {
    return world_.context_.same_host(m->owner_rank, rank_) && m->pid_namespace == here && m->ref.pid == owner.pid &&
           m->ref.fd == owner.fd;
  });
  if (it == world_.memfds_.end())
    return Status(ErrorCode::kNotFound, fmt::format("open({}) failed: No such file or directory", path));
  if ((*it)->bytes.size() < bytes)
    return failed_precondition(fmt::format("{} holds {} bytes, {} expected", path, (*it)->bytes.size(), bytes));
  return std::unique_ptr<ShmMapping>(std::make_unique<SimMemfdMapping>(nullptr, *it, path, false));
}

std::string SimProcessSharedMemory::file_key(const std::string& name) const {
  const HostSpec& host = world_.context_.host_of(rank_);
  return host.name + "/" + host.boot_id + "/" + name;
}

Result<std::unique_ptr<ShmMapping>> SimProcessSharedMemory::create_file(const std::string& name, uint64_t bytes) {
  if (world_.context_.is_dead(rank_)) return world_.context_.dead_status(rank_, "table_file_create");
  auto [it, created] = world_.files_.try_emplace(file_key(name));
  if (!created) return Status(ErrorCode::kAlreadyExists, fmt::format("creating table file {} failed: File exists", name));
  it->second = std::make_shared<MemfdWorld::Memfd>();
  it->second->owner_rank = rank_;
  it->second->name = name;
  it->second->bytes.resize(bytes);
  return std::unique_ptr<ShmMapping>(std::make_unique<SimMemfdMapping>(nullptr, it->second, name, true));
}

Result<std::unique_ptr<ShmMapping>> SimProcessSharedMemory::open_file_read_only(const std::string& name,
                                                                                uint64_t bytes) {
  if (world_.context_.is_dead(rank_)) return world_.context_.dead_status(rank_, "table_file_open");
  auto it = world_.files_.find(file_key(name));
  if (it == world_.files_.end())
    return Status(ErrorCode::kNotFound, fmt::format("open({}) failed: No such file or directory", name));
  if (it->second->bytes.size() < bytes)
    return failed_precondition(fmt::format("{} holds {} bytes, {} expected", name, it->second->bytes.size(), bytes));
  return std::unique_ptr<ShmMapping>(std::make_unique<SimMemfdMapping>(nullptr, it->second, name, false));
}

Status SimProcessSharedMemory::remove_file(const std::string& name) {
  if (world_.files_.erase(file_key(name)) == 1) return Status::ok();
  return Status(ErrorCode::kNotFound, fmt::format("unlink({}) failed: No such file or directory", name));
}

}  // namespace engram::sim
