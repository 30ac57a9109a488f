#include "sim/sim_host_shared_memory.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>

#include "core/backend/shm_fill_limits.h"
#include "core/base/units.h"

namespace engram::sim {

struct ShmWorld::Tmpfs {
  std::string host_name;
  bool mounted = true;
  uint64_t bytes_total = 0;     // what statvfs shows (and the placement reads)
  std::optional<uint64_t> bytes_enforced;  // what it really allows; unset: the total (a Kubernetes sizeLimit is less)
  uint64_t ram_bytes = 0;       // the host's RAM behind it; 0 = not modelled
  uint64_t bytes_used = 0;
  std::map<std::string, std::shared_ptr<Segment>> names;
};

// Pages come from an anonymous MAP_NORESERVE mapping: the OS backs only what
// is touched, so a 189 GiB emulated table costs what a test writes.
struct ShmWorld::Segment {
  std::shared_ptr<Tmpfs> tmpfs;
  std::string name;
  uint64_t bytes = 0;            // really mapped
  uint64_t accounted_bytes = 0;  // what tmpfs, the cgroup and RAM count: the table it stands for
  std::byte* data = nullptr;
  uint64_t ledger_id = 0;
  int numa_node = 0;               // the writer's socket: first touch puts the pages there
  uint64_t* charged_to = nullptr;  // the writer's memory cgroup charge, once the pages are written
  ~Segment() {
    if (data != nullptr) ::munmap(data, bytes);
    tmpfs->bytes_used -= accounted_bytes;  // the space returns when the last reference goes
    if (charged_to != nullptr) *charged_to -= accounted_bytes;  // and the writer's cgroup is uncharged
  }
};

struct ShmWorld::MappingRecord {
  std::shared_ptr<Segment> segment;
  uint64_t ledger_id = 0;
  bool released = false;
};

namespace {

class SimShmMapping final : public ShmMapping {
 public:
  SimShmMapping(Ledger& ledger, std::shared_ptr<ShmWorld::MappingRecord> record, uint64_t bytes, bool writable,
                std::string name)
      : ledger_(ledger), record_(std::move(record)), bytes_(bytes), writable_(writable), name_(std::move(name)) {}
  ~SimShmMapping() override {
    if (record_->released) return;  // the process died; the OS already unmapped
    record_->released = true;
    ledger_.remove(ResourceKind::kShmMapping, record_->ledger_id);
    record_->segment.reset();
  }
  std::span<std::byte> bytes() override {
    if (!writable_ || record_->released) return {};
    return {record_->segment->data, bytes_};
  }
  std::span<const std::byte> data() const override {
    if (record_->released) return {};
    return {record_->segment->data, bytes_};
  }
  const std::string& name() const override { return name_; }

 private:
  Ledger& ledger_;
  std::shared_ptr<ShmWorld::MappingRecord> record_;
  uint64_t bytes_;
  bool writable_;
  std::string name_;
};

}  // namespace

ShmWorld::ShmWorld(SimContext& context, std::map<std::string, uint64_t, std::less<>> modelled_bytes)
    : context_(context),
      charged_bytes_by_rank_(static_cast<size_t>(context.rank_count()), 0),
      mappings_by_rank_(static_cast<size_t>(context.rank_count())),
      modelled_bytes_(std::move(modelled_bytes)) {
  const auto& hosts = context.hosts();
  // One tmpfs per host identity (two containers of one machine share it).
  std::map<std::pair<std::string, std::string>, std::shared_ptr<Tmpfs>> by_identity;
  for (size_t h = 0; h < hosts.size(); ++h) {
    std::shared_ptr<Tmpfs>& shared = by_identity[{hosts[h].name, hosts[h].boot_id}];
    if (!shared) {
      shared = std::make_shared<Tmpfs>();
      shared->host_name = hosts[h].name;
      shared->mounted = hosts[h].shm_mounted;
      shared->bytes_total = hosts[h].tmpfs_bytes_total;
      shared->bytes_enforced = hosts[h].tmpfs_bytes_enforced;
      shared->ram_bytes = hosts[h].host_memory_bytes;
      shared->bytes_used = hosts[h].tmpfs_bytes_used;  // other processes' files, never given back
    }
    tmpfs_by_host_.push_back(shared);
  }
}

int ShmWorld::numa_node_of(int rank) const {
  return gpu_numa_node(context_.host_of(rank), context_.place(rank).gpu);
}

ShmWorld::~ShmWorld() {
  // A named segment and its Tmpfs point at each other (a file keeps its
  // filesystem's accounting; the filesystem lists its files). The emulated
  // hosts end with the world, so drop the names and the cycle with them.
  for (auto& tmpfs : tmpfs_by_host_) {
    if (!tmpfs) continue;
    auto names = std::move(tmpfs->names);
    tmpfs->names.clear();
    names.clear();
  }
}

void ShmWorld::release_process(int rank) {
  for (auto& record : mappings_by_rank_[static_cast<size_t>(rank)]) {
    if (record->released) continue;
    record->released = true;
    context_.ledger().remove(ResourceKind::kShmMapping, record->ledger_id);
    // The memory stays allocated: the dead rank's code may still hold the
    // span. The segment goes when the mapping object is destroyed.
  }
  mappings_by_rank_[static_cast<size_t>(rank)].clear();
}

uint64_t ShmWorld::used_bytes(int host) const { return tmpfs_by_host_[static_cast<size_t>(host)]->bytes_used; }

size_t ShmWorld::segment_count(int host) const { return tmpfs_by_host_[static_cast<size_t>(host)]->names.size(); }

SimHostSharedMemory::SimHostSharedMemory(ShmWorld& world, int rank)
    : world_(world), context_(world.context_), rank_(rank) {
  ENGRAM_CHECK(rank >= 0 && rank < context_.rank_count());
}

Status SimHostSharedMemory::check_mounted(const char* step) const {
  const auto& fs = *world_.tmpfs_by_host_[static_cast<size_t>(context_.place(rank_).host)];
  if (fs.mounted) return Status::ok();
  return Status(ErrorCode::kFailedPrecondition,
                fmt::format("/dev/shm is not mounted on host {}: run the container with --ipc=host or "
                            "--shm-size=<table size>",
                            fs.host_name),
                {rank_, -1, step});
}

Result<ShmInfo> SimHostSharedMemory::info() {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, "shm_info");
  const auto& fs = *world_.tmpfs_by_host_[static_cast<size_t>(context_.place(rank_).host)];
  ShmInfo info;
  info.mounted = fs.mounted;
  if (fs.mounted) {
    info.tmpfs_bytes_total = fs.bytes_total;
    info.tmpfs_bytes_free = fs.bytes_total - fs.bytes_used;
  }
  return info;
}

std::unique_ptr<ShmMapping> SimHostSharedMemory::map_segment(std::shared_ptr<ShmWorld::Segment> segment,
                                                             uint64_t bytes, bool writable) {
  auto record = std::make_shared<ShmWorld::MappingRecord>();
  record->segment = segment;
  record->ledger_id = context_.ledger().add(
      ResourceKind::kShmMapping, rank_, bytes,
      LedgerDetail::note(fmt::format("/dev/shm/{} on {} ({})", segment->name, segment->tmpfs->host_name,
                                     writable ? "read-write" : "read-only")));
  auto& list = world_.mappings_by_rank_[static_cast<size_t>(rank_)];
  // Drop records of mappings already destroyed, so the list stays short.
  std::erase_if(list, [](const auto& r) { return r->released; });
  list.push_back(record);
  return std::make_unique<SimShmMapping>(context_.ledger(), std::move(record), bytes, writable, segment->name);
}

Result<std::unique_ptr<ShmMapping>> SimHostSharedMemory::create(const std::string& name, uint64_t bytes) {
  auto fail = [&](ErrorCode code, std::string message, const char* step = "shm_create") {
    return Status(code, std::move(message), {rank_, -1, step});
  };
  switch (context_.visit(FaultSite::kShmCreate, rank_)) {
    case SimContext::Visit::kDied: return context_.dead_status(rank_, "shm_create");
    case SimContext::Visit::kFault:
      return fail(ErrorCode::kResourceExhausted,
                  fmt::format("shm_open(/dev/shm/{}): EMFILE: Too many open files (injected fault, site shm_create)",
                              name));
    case SimContext::Visit::kProceed: break;
  }
  ENGRAM_RETURN_IF_ERROR(check_mounted("shm_create"));
  if (name.empty() || name.size() > 255 || name.find('/') != std::string::npos)
    return fail(ErrorCode::kInvalidArgument,
                fmt::format("shm_open('{}'): EINVAL: a segment name is 1-255 characters without '/'", name));
  auto fs = world_.tmpfs_by_host_[static_cast<size_t>(context_.place(rank_).host)];
  if (fs->names.count(name) != 0)
    return fail(ErrorCode::kAlreadyExists,
                fmt::format("shm_open(/dev/shm/{}, O_CREAT|O_EXCL): EEXIST: File exists on host {} (left over from "
                            "a crashed run? remove it or use a new job id)",
                            name, fs->host_name));
  auto modelled = world_.modelled_bytes_.find(name);
  const uint64_t accounted = modelled == world_.modelled_bytes_.end() ? bytes : std::max(bytes, modelled->second);
  if (fs->bytes_used + accounted > fs->bytes_total) {
    coverage_probe<"sim: shm ENOSPC">();
    return fail(ErrorCode::kResourceExhausted,
                fmt::format("fallocate(/dev/shm/{}, {}): ENOSPC: No space left on device: /dev/shm on host {} is "
                            "{} in total with {} in use; raise it (docker --shm-size={}m) or use --ipc=host",
                            name, format_bytes(accounted), fs->host_name, format_bytes(fs->bytes_total),
                            format_bytes(fs->bytes_used), (fs->bytes_used + accounted + kMiB - 1) / kMiB));
  }
  auto segment = std::make_shared<ShmWorld::Segment>();
  segment->tmpfs = fs;
  segment->name = name;
  segment->bytes = bytes;
  segment->accounted_bytes = accounted;
  fs->bytes_used += accounted;  // given back by ~Segment
  if (bytes > 0) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return fail(ErrorCode::kResourceExhausted,
                  fmt::format("emulator: cannot reserve {} of address space for /dev/shm/{}", format_bytes(bytes), name));
    segment->data = static_cast<std::byte*>(p);
  }
  // The file exists from shm_open + ftruncate on: a peer can see it and
  // unlink it while this rank is still touching its pages (or hung there).
  fs->names.emplace(name, segment);
  segment->ledger_id = context_.ledger().add(ResourceKind::kShmSegment, rank_, bytes,
                                             LedgerDetail::note(fmt::format("/dev/shm/{} on {}", name, fs->host_name)));
  auto remove_file = [&] {
    auto it = fs->names.find(name);
    if (it == fs->names.end() || it->second != segment) return;  // a peer unlinked it already
    context_.ledger().remove(ResourceKind::kShmSegment, segment->ledger_id);
    fs->names.erase(it);
  };
  // Touching the pages is where a full tmpfs really bites (SIGBUS): a failure
  // here must not leave the half-made segment behind.
  switch (context_.visit(FaultSite::kShmWrite, rank_)) {
    case SimContext::Visit::kDied:
      // The file stays on tmpfs, as after a real crash between create and fill.
      return context_.dead_status(rank_, "shm_write");
    case SimContext::Visit::kFault:
      remove_file();
      coverage_probe<"sim: shm segment removed after a failed touch">();
      return fail(ErrorCode::kResourceExhausted,
                  fmt::format("touching /dev/shm/{} on host {}: SIGBUS (tmpfs out of pages; injected fault, site "
                              "shm_write); the segment was removed",
                              name, fs->host_name),
                  "shm_write");
    case SimContext::Visit::kProceed: break;
  }
  // What containers do to the pages once they are written (the placement
  // read only the tmpfs total): refused as the real backend refuses, and the
  // half-made segment goes with the refusal.
  if (Status limit = check_fill_limits(*fs, name, accounted); !limit.is_ok()) {
    remove_file();
    return limit;
  }
  uint64_t& charge = world_.charged_bytes_by_rank_[static_cast<size_t>(rank_)];
  charge += accounted;
  segment->charged_to = &charge;
  segment->numa_node = world_.numa_node_of(rank_);
  ENGRAM_TRACE(context_.scheduler(), "shm_create r{} {} {}", rank_, name, bytes);
  return map_segment(std::move(segment), bytes, /*writable=*/true);
}

Status SimHostSharedMemory::check_fill_limits(const ShmWorld::Tmpfs& fs, const std::string& name,
                                              uint64_t bytes) const {
  auto with_rank = [&](Status s) { return std::move(s).with_context(rank_, -1, "shm_write"); };
  const HostSpec& host = context_.host_of(rank_);
  const uint64_t charged = world_.charged_bytes_by_rank_[static_cast<size_t>(rank_)];
  if (host.memory_limit_bytes_per_rank && charged + bytes > *host.memory_limit_bytes_per_rank) {
    coverage_probe<"sim: shm fill past the writer's memory cgroup refused">();
    return with_rank(memory_cgroup_refusal("/dev/shm/" + name, bytes,
                                           fmt::format("the memory cgroup of rank {} on host {}", rank_, fs.host_name),
                                           *host.memory_limit_bytes_per_rank, charged));
  }
  // fs.bytes_used already holds this segment.
  if (fs.bytes_enforced && fs.bytes_used > *fs.bytes_enforced) {
    coverage_probe<"sim: shm fill past a tmpfs limit its total hides refused">();
    return with_rank(tmpfs_enforced_limit_refusal(name, bytes, fs.host_name, fs.bytes_total, *fs.bytes_enforced,
                                                  fs.bytes_used - bytes));
  }
  if (fs.ram_bytes != 0 && fs.bytes_used > fs.ram_bytes) {
    coverage_probe<"sim: shm fill past the host's RAM refused">();
    return with_rank(host_ram_refusal(name, bytes, fs.host_name, fs.ram_bytes, fs.bytes_used - bytes));
  }
  return Status::ok();
}

Result<std::unique_ptr<ShmMapping>> SimHostSharedMemory::open_read_only(const std::string& name, uint64_t bytes) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, "shm_open");
  ENGRAM_RETURN_IF_ERROR(check_mounted("shm_open"));
  auto fs = world_.tmpfs_by_host_[static_cast<size_t>(context_.place(rank_).host)];
  auto it = fs->names.find(name);
  if (it == fs->names.end())
    return Status(ErrorCode::kNotFound,
                  fmt::format("shm_open(/dev/shm/{}): ENOENT: No such file or directory on host {}", name,
                              fs->host_name),
                  {rank_, -1, "shm_open"});
  if (bytes > it->second->bytes)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("mmap(/dev/shm/{}, {} bytes): the segment holds only {} bytes", name, bytes,
                              it->second->bytes),
                  {rank_, -1, "shm_open"});
  if (it->second->numa_node != world_.numa_node_of(rank_)) {
    // The one copy sits on its writer's socket; this rank reads it across
    // the socket link (one copy per NUMA node would avoid it).
    coverage_probe<"sim: /dev/shm table read from another socket">();
    ++world_.remote_numa_maps_;
    ENGRAM_TRACE(context_.scheduler(), "shm_remote_numa r{} {} node {}", rank_, name, it->second->numa_node);
  }
  return map_segment(it->second, bytes, /*writable=*/false);
}

Status SimHostSharedMemory::unlink(const std::string& name) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, "shm_unlink");
  ENGRAM_RETURN_IF_ERROR(check_mounted("shm_unlink"));
  auto fs = world_.tmpfs_by_host_[static_cast<size_t>(context_.place(rank_).host)];
  auto it = fs->names.find(name);
  if (it == fs->names.end())
    return Status(ErrorCode::kNotFound,
                  fmt::format("shm_unlink(/dev/shm/{}): ENOENT: No such file or directory on host {}", name,
                              fs->host_name),
                  {rank_, -1, "shm_unlink"});
  context_.ledger().remove(ResourceKind::kShmSegment, it->second->ledger_id);
  fs->names.erase(it);  // space returns once the last mapping goes
  return Status::ok();
}

}  // namespace engram::sim
