#include "sim/sim_device_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/backend/vmm_world_rules.h"
#include "core/model/gpu_models.h"
#include "core/base/units.h"

namespace engram::sim {

namespace {

constexpr uint64_t kGranularityBytes = kVmmGranularityBytes;
// Each process's device addresses start in their own 1 TiB window, so a
// pointer used in the wrong process is caught as an illegal address.
constexpr DevicePtr kAddressBase = 0x200000000000ull;
constexpr DevicePtr kAddressWindow = 1ull << 40;
constexpr uint8_t kFabricMagic[4] = {'E', 'N', 'G', 'F'};

// Every error names its step from the one table the real backend uses too.
const char* step(DeviceStep s) { return device_step_name(s); }

uint64_t gpu_key(int host, int gpu) { return (static_cast<uint64_t>(host) << 16) | static_cast<uint64_t>(gpu); }

uint64_t fabric_check(uint64_t physical) {
  uint64_t state = physical ^ 0x6661627269636b21ull;
  return splitmix64(state);
}

}  // namespace

// ---------------------------------------------------------------- DeviceWorld

DeviceWorld::DeviceWorld(SimContext& context)
    : context_(context), processes_(static_cast<size_t>(context.rank_count())) {
  for (int r = 0; r < context.rank_count(); ++r)
    processes_[static_cast<size_t>(r)].next_address = kAddressBase + static_cast<DevicePtr>(r) * kAddressWindow;
  // Hosts as numbers: a FABRIC import asks whether two hosts are one
  // machine or share a domain, 70 times a rank in a rack, and comparing the
  // hosts' strings each time reached into every peer's host record.
  std::map<std::pair<std::string, std::string>, int> machines;
  std::map<std::string, int> domains;
  for (const HostSpec& h : context.hosts()) {
    machine_of_host_.push_back(machines.emplace(std::pair{h.name, h.boot_id}, static_cast<int>(machines.size())).first->second);
    domain_of_host_.push_back(h.nvlink_domain.empty()
                                  ? -1
                                  : domains.emplace(h.nvlink_domain, static_cast<int>(domains.size())).first->second);
  }
}

bool DeviceWorld::same_machine(int host_a, int host_b) const {
  return machine_of_host_[static_cast<size_t>(host_a)] == machine_of_host_[static_cast<size_t>(host_b)];
}

bool DeviceWorld::same_nvlink_domain(int host_a, int host_b) const {
  const int a = domain_of_host_[static_cast<size_t>(host_a)];
  return a >= 0 && a == domain_of_host_[static_cast<size_t>(host_b)];
}

DeviceWorld::~DeviceWorld() = default;

DeviceWorld::Physical* DeviceWorld::physical(uint64_t id) {
  if (id == 0 || id > physicals_.size()) return nullptr;
  return physicals_[id - 1].get();
}

DeviceWorld::Physical& DeviceWorld::new_physical() {
  physicals_.push_back(std::make_unique<Physical>());
  ++physicals_live_;
  Physical& p = *physicals_.back();
  p.id = physicals_.size();
  return p;
}

uint64_t DeviceWorld::gpu_used_bytes(int host, int gpu) const {
  auto it = gpu_used_bytes_.find(gpu_key(host, gpu));
  return it == gpu_used_bytes_.end() ? 0 : it->second;
}

void DeviceWorld::add_reference(uint64_t id) {
  Physical* p = physical(id);
  ENGRAM_CHECK(p != nullptr && p->references > 0);
  ++p->references;
}

void DeviceWorld::drop_reference(uint64_t id) {
  Physical* p = physical(id);
  ENGRAM_CHECK(p != nullptr && p->references > 0);
  if (--p->references > 0) return;
  // Last handle, mapping or file gone: the driver frees the memory.
  uint64_t& used = gpu_used_bytes_[gpu_key(p->host, p->gpu)];
  ENGRAM_CHECK(used >= p->bytes);
  used -= p->bytes;
  physicals_[id - 1].reset();
  --physicals_live_;
}

uint64_t DeviceWorld::new_file(uint64_t physical_id) {
  uint64_t id = context_.next_id();
  files_.emplace(id, File{physical_id, 0});
  add_reference(physical_id);
  return id;
}

void DeviceWorld::add_file_reference(uint64_t file) {
  auto it = files_.find(file);
  ENGRAM_CHECK(it != files_.end());
  ++it->second.references;
}

void DeviceWorld::drop_file_reference(uint64_t file) {
  auto it = files_.find(file);
  ENGRAM_CHECK(it != files_.end() && it->second.references > 0);
  if (--it->second.references > 0) return;
  uint64_t physical_id = it->second.physical;
  files_.erase(it);
  drop_reference(physical_id);
}

uint64_t DeviceWorld::physical_of_file(uint64_t file) const {
  auto it = files_.find(file);
  return it == files_.end() ? 0 : it->second.physical;
}

int DeviceWorld::install_fd(int rank, uint64_t file, bool received, uint64_t bytes) {
  Process& proc = process(rank);
  int fd = proc.next_fd++;
  add_file_reference(file);
  const uint64_t ledger_id = context_.ledger().add(received ? ResourceKind::kReceivedFd : ResourceKind::kExportFd, rank,
                                                   bytes, LedgerDetail::at(static_cast<uint64_t>(fd)));
  proc.fds.emplace(fd, OpenFd{file, ledger_id, received});
  return fd;
}

uint64_t DeviceWorld::file_of(int rank, int fd) const {
  const Process& proc = processes_[static_cast<size_t>(rank)];
  auto it = proc.fds.find(fd);
  return it == proc.fds.end() ? 0 : it->second.file;
}

Status DeviceWorld::close_fd(int rank, int fd) {
  Process& proc = process(rank);
  auto it = proc.fds.find(fd);
  if (it == proc.fds.end())
    return Status(ErrorCode::kInvalidArgument, fmt::format("close({}): EBADF: Bad file descriptor", fd),
                  {rank, -1, step(DeviceStep::kCloseFd)});
  OpenFd open = it->second;
  proc.fds.erase(it);
  context_.ledger().remove(open.received ? ResourceKind::kReceivedFd : ResourceKind::kExportFd, open.ledger_id);
  drop_file_reference(open.file);
  return Status::ok();
}

void DeviceWorld::release_process(int rank) {
  Process& proc = process(rank);
  for (auto& [address, m] : proc.mappings) {
    context_.ledger().remove(ResourceKind::kMapping, m.ledger_id);
    drop_reference(m.physical);
  }
  proc.mappings.clear();
  for (auto& [address, r] : proc.reservations) context_.ledger().remove(ResourceKind::kReservation, r.ledger_id);
  proc.reservations.clear();
  for (auto& [h, handle] : proc.handles) {
    context_.ledger().remove(handle.imported ? ResourceKind::kImportedHandle : ResourceKind::kAllocation,
                             handle.ledger_id);
    drop_reference(handle.physical);
  }
  proc.handles.clear();
  std::vector<int> fds;
  for (auto& [fd, open] : proc.fds) fds.push_back(fd);
  for (int fd : fds) close_fd(rank, fd).ignore();
}

// ------------------------------------------------------------ SimDeviceMemory

SimDeviceMemory::SimDeviceMemory(DeviceWorld& world, int rank)
    : world_(world), context_(world.context()), rank_(rank) {
  ENGRAM_CHECK(rank >= 0 && rank < context_.rank_count());
}

Result<DeviceInfo> SimDeviceMemory::info() {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kInfo));
  const HostSpec& host = context_.host_of(rank_);
  const RankPlace& place = context_.place(rank_);
  DeviceInfo info;
  info.ordinal = host.visible_gpus_per_rank == 1 ? 0 : place.gpu;
  info.name = "NVIDIA " + host.gpu_model;
  info.memory_bytes_total = host.gpu_memory_bytes;
  info.memory_bytes_free = host.gpu_memory_bytes - world_.gpu_used_bytes(place.host, place.gpu);
  info.vmm_supported = true;
  info.posix_fd_supported = host.posix_fd_attribute;
  info.fabric_attribute = host.fabric_attribute;
  info.granularity_bytes = kGranularityBytes;
  // One bus slot per emulated GPU of the host (ranks sharing a GPU share it).
  info.bus_id = fmt::format("{:04x}:{:02x}:00.0", place.gpu / 255, place.gpu % 255 + 1);
  return info;
}

Status SimDeviceMemory::fabric_capability(const char* call, FabricUse use) const {
  // The rules the emulated driver applies too (core/backend/vmm_world_rules.h):
  // a create and an import without an IMEX channel answer different codes.
  const HostSpec& host = context_.host_of(rank_);
  const vmm_rules::FabricHost fabric_host{.name = host.name,
                                          .where = context_.where(rank_),
                                          .gpu_model = host.gpu_model,
                                          .fabric_attribute = host.fabric_attribute,
                                          .imex_channel = host.imex_channel};
  std::optional<vmm_rules::Refusal> refused = use == FabricUse::kImport
                                                  ? vmm_rules::fabric_import_capability_refusal(fabric_host, call)
                                                  : vmm_rules::fabric_refusal(fabric_host, call);
  if (refused) return cuda_error(refused->cu_error, std::move(refused->why));
  return Status::ok();
}

Status SimDeviceMemory::probe_fabric() {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kProbeFabric));
  // The real probe creates and exports one granule; the emulator answers what
  // that would: the attribute alone is not enough, the IMEX channel decides.
  Status capable = fabric_capability("cuMemCreate(FABRIC, 2 MiB probe)", FabricUse::kCreate);
  if (!capable.is_ok()) return std::move(capable).with_context(rank_, -1, step(DeviceStep::kProbeFabric));
  const RankPlace& place = context_.place(rank_);
  if (world_.gpu_used_bytes(place.host, place.gpu) + kGranularityBytes > context_.host_of(rank_).gpu_memory_bytes)
    return std::move(cuda_error("CUDA_ERROR_OUT_OF_MEMORY",
                                fmt::format("cuMemCreate(FABRIC, 2 MiB probe) on {}", context_.where(rank_))))
        .with_context(rank_, -1, step(DeviceStep::kProbeFabric));
  return Status::ok();
}

Result<AllocationHandle> SimDeviceMemory::create(uint64_t bytes, HandleType exportable_as) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kCreate));
  auto fail = [&](Status s) { return std::move(s).with_context(rank_, -1, step(DeviceStep::kCreate)); };
  if (bytes == 0 || bytes % kGranularityBytes != 0)
    return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                           fmt::format("cuMemCreate({} bytes): size must be a non-zero multiple of the {} "
                                       "granularity (round up with cuMemGetAllocationGranularity)",
                                       bytes, format_bytes(kGranularityBytes))));
  if (exportable_as == HandleType::kFabric) {
    Status capable = fabric_capability("cuMemCreate(FABRIC)", FabricUse::kCreate);
    if (!capable.is_ok()) return fail(std::move(capable));
  }
  if (exportable_as == HandleType::kPosixFd && !context_.host_of(rank_).posix_fd_attribute)
    return fail(cuda_error("CUDA_ERROR_NOT_SUPPORTED",
                           fmt::format("cuMemCreate(POSIX_FILE_DESCRIPTOR): {} does not support POSIX fd handles "
                                       "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0)",
                                       context_.where(rank_))));
  const RankPlace& place = context_.place(rank_);
  const HostSpec& host = context_.host_of(rank_);
  uint64_t& used = world_.gpu_used_bytes_[gpu_key(place.host, place.gpu)];
  if (used + bytes > host.gpu_memory_bytes)
    return fail(cuda_error("CUDA_ERROR_OUT_OF_MEMORY",
                           fmt::format("cuMemCreate({}) on {}: {} of {} already in use", format_gib(bytes),
                                       context_.where(rank_), format_gib(used), format_gib(host.gpu_memory_bytes))));
  used += bytes;
  DeviceWorld::Physical& p = world_.new_physical();
  const uint64_t id = p.id;
  p.host = place.host;
  p.gpu = place.gpu;
  p.creator_rank = rank_;
  p.bytes = bytes;
  p.exportable_as = exportable_as;
  p.references = 1;
  AllocationHandle handle = context_.next_id();
  const uint64_t ledger_id = context_.ledger().add(
      ResourceKind::kAllocation, rank_, bytes,
      LedgerDetail::note(fmt::format("gpu {} of {}, {}", place.gpu, host.name, handle_type_name(exportable_as))));
  world_.process(rank_).handles.emplace(handle, DeviceWorld::Handle{id, false, ledger_id});
  ENGRAM_TRACE(context_.scheduler(), "create r{} {} {}", rank_, bytes, handle_type_name(exportable_as));
  return handle;
}

Result<ShareableHandle> SimDeviceMemory::export_handle(AllocationHandle allocation, HandleType type) {
  auto fail = [&](Status s) { return std::move(s).with_context(rank_, -1, step(DeviceStep::kExport)); };
  switch (context_.visit(FaultSite::kExport, rank_)) {
    case SimContext::Visit::kDied: return context_.dead_status(rank_, step(DeviceStep::kExport));
    case SimContext::Visit::kFault:
      return fail(cuda_error("CUDA_ERROR_OUT_OF_MEMORY",
                             "cuMemExportToShareableHandle: injected fault (site export)"));
    case SimContext::Visit::kProceed: break;
  }
  auto& proc = world_.process(rank_);
  auto it = proc.handles.find(allocation);
  if (it == proc.handles.end())
    return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                           fmt::format("cuMemExportToShareableHandle: allocation handle {:#x} is not live in this "
                                       "process",
                                       allocation)));
  DeviceWorld::Physical* p = world_.physical(it->second.physical);
  ENGRAM_CHECK(p != nullptr);
  if (p->exportable_as != type)
    return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                           fmt::format("cuMemExportToShareableHandle({}): the allocation was created exportable "
                                       "as {} only",
                                       handle_type_name(type), handle_type_name(p->exportable_as))));
  ShareableHandle out;
  out.type = type;
  if (type == HandleType::kPosixFd) {
    uint64_t file = world_.new_file(p->id);
    // The file holds the memory alive (as a dma-buf would) until its last fd closes.
    out.fd = world_.install_fd(rank_, file, /*received=*/false, p->bytes);
  } else {
    std::memcpy(out.fabric.data(), kFabricMagic, 4);
    uint64_t check = fabric_check(p->id);
    std::memcpy(out.fabric.data() + 4, &p->id, 8);
    std::memcpy(out.fabric.data() + 12, &check, 8);
    for (size_t i = 20; i < out.fabric.size(); ++i) out.fabric[i] = static_cast<uint8_t>(check >> (i % 8 * 8));
  }
  ENGRAM_TRACE(context_.scheduler(), "export r{} {}", rank_, handle_type_name(type));
  return out;
}

Result<AllocationHandle> SimDeviceMemory::import_handle(const ShareableHandle& handle) {
  auto fail = [&](Status s) { return std::move(s).with_context(rank_, -1, step(DeviceStep::kImport)); };
  switch (context_.visit(FaultSite::kImport, rank_)) {
    case SimContext::Visit::kDied: return context_.dead_status(rank_, step(DeviceStep::kImport));
    case SimContext::Visit::kFault:
      return fail(cuda_error("CUDA_ERROR_NOT_PERMITTED",
                             "cuMemImportFromShareableHandle: injected fault (site import)"));
    case SimContext::Visit::kProceed: break;
  }
  uint64_t physical_id = 0;
  if (handle.type == HandleType::kPosixFd) {
    uint64_t file = world_.file_of(rank_, handle.fd);
    if (file == 0)
      return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                             fmt::format("cuMemImportFromShareableHandle(fd {}): not an open fd of this process",
                                         handle.fd)));
    physical_id = world_.physical_of_file(file);
  } else {
    uint64_t check = 0;
    std::memcpy(&physical_id, handle.fabric.data() + 4, 8);
    std::memcpy(&check, handle.fabric.data() + 12, 8);
    if (std::memcmp(handle.fabric.data(), kFabricMagic, 4) != 0 || check != fabric_check(physical_id))
      return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                             "cuMemImportFromShareableHandle(FABRIC): the 64 bytes are not a fabric handle"));
    Status capable = fabric_capability("cuMemImportFromShareableHandle(FABRIC)", FabricUse::kImport);
    if (!capable.is_ok()) return fail(std::move(capable));
  }
  DeviceWorld::Physical* p = world_.physical(physical_id);
  if (p == nullptr)
    return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                           "cuMemImportFromShareableHandle: the exported allocation no longer exists (its exporter "
                           "released it)"));
  if (handle.type == HandleType::kFabric) {
    const int my_host = context_.place(rank_).host;
    if (!world_.same_machine(my_host, p->host) && !world_.same_nvlink_domain(my_host, p->host)) {
      const HostSpec& mine = context_.hosts()[static_cast<size_t>(my_host)];
      const HostSpec& theirs = context_.hosts()[static_cast<size_t>(p->host)];
      auto refused = vmm_rules::fabric_import_refusal(theirs.name, theirs.nvlink_domain, mine.name,
                                                      mine.nvlink_domain, /*same_machine=*/false);
      ENGRAM_CHECK(refused.has_value());
      return fail(cuda_error(refused->cu_error, std::move(refused->why)));
    }
  }
  world_.add_reference(physical_id);
  AllocationHandle h = context_.next_id();
  const uint64_t ledger_id =
      context_.ledger().add(ResourceKind::kImportedHandle, rank_, p->bytes, LedgerDetail::of_rank(p->creator_rank));
  world_.process(rank_).handles.emplace(h, DeviceWorld::Handle{physical_id, true, ledger_id});
  ENGRAM_TRACE(context_.scheduler(), "import r{} from r{}", rank_, p->creator_rank);
  return h;
}

Result<DevicePtr> SimDeviceMemory::reserve(uint64_t bytes) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kReserve));
  if (bytes == 0 || bytes % kGranularityBytes != 0)
    return std::move(cuda_error("CUDA_ERROR_INVALID_VALUE",
                                fmt::format("cuMemAddressReserve({} bytes): size must be a non-zero multiple of {}",
                                            bytes, format_bytes(kGranularityBytes))))
        .with_context(rank_, -1, step(DeviceStep::kReserve));
  auto& proc = world_.process(rank_);
  DevicePtr address = proc.next_address;
  proc.next_address += bytes + kGranularityBytes;  // a guard gap between ranges
  ENGRAM_CHECK(proc.next_address - (kAddressBase + static_cast<DevicePtr>(rank_) * kAddressWindow) < kAddressWindow);
  const uint64_t ledger_id = context_.ledger().add(ResourceKind::kReservation, rank_, bytes, LedgerDetail::at(address));
  proc.reservations.emplace(address, DeviceWorld::Reservation{bytes, ledger_id});
  return address;
}

Status SimDeviceMemory::map(DevicePtr address, uint64_t bytes, AllocationHandle allocation) {
  auto fail = [&](Status s) { return std::move(s).with_context(rank_, -1, step(DeviceStep::kMap)); };
  switch (context_.visit(FaultSite::kMap, rank_)) {
    case SimContext::Visit::kDied: return context_.dead_status(rank_, step(DeviceStep::kMap));
    case SimContext::Visit::kFault:
      return fail(cuda_error("CUDA_ERROR_OUT_OF_MEMORY", "cuMemMap: injected fault (site map)"));
    case SimContext::Visit::kProceed: break;
  }
  if (bytes == 0 || bytes % kGranularityBytes != 0 || address % kGranularityBytes != 0)
    return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                           fmt::format("cuMemMap({:#x}, {} bytes): address and size must be multiples of {}",
                                       address, bytes, format_bytes(kGranularityBytes))));
  auto& proc = world_.process(rank_);
  auto h = proc.handles.find(allocation);
  if (h == proc.handles.end())
    return fail(cuda_error("CUDA_ERROR_INVALID_HANDLE",
                           fmt::format("cuMemMap: allocation handle {:#x} is not live in this process", allocation)));
  DeviceWorld::Physical* p = world_.physical(h->second.physical);
  ENGRAM_CHECK(p != nullptr);
  if (bytes != p->bytes)
    return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                           fmt::format("cuMemMap: size {} differs from the allocation's {}", bytes, p->bytes)));
  // The range must sit inside one reservation and overlap no mapping.
  auto r = proc.reservations.upper_bound(address);
  if (r == proc.reservations.begin() || std::prev(r)->first + std::prev(r)->second.bytes < address + bytes)
    return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                           fmt::format("cuMemMap({:#x}, {} bytes): the range is not inside a reservation", address,
                                       bytes)));
  auto next = proc.mappings.lower_bound(address);
  bool overlaps = (next != proc.mappings.end() && next->first < address + bytes) ||
                  (next != proc.mappings.begin() && std::prev(next)->first + std::prev(next)->second.bytes > address);
  if (overlaps)
    return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                           fmt::format("cuMemMap({:#x}): the range is already mapped", address)));
  world_.add_reference(p->id);
  const uint64_t ledger_id =
      context_.ledger().add(ResourceKind::kMapping, rank_, bytes, LedgerDetail::at_of_rank(address, p->creator_rank));
  // The first map into a reservation says how many will follow (a peer
  // table maps one allocation per group member, each importing a handle):
  // room for them all at once, instead of regrowing the tables ~log2(n) times.
  if (std::prev(r)->first == address) {
    const uint64_t expected = std::prev(r)->second.bytes / bytes;
    proc.mappings.reserve(proc.mappings.size() + expected);
    proc.handles.reserve(proc.handles.size() + expected);
  }
  proc.mappings.emplace(address, DeviceWorld::Mapping{bytes, p->id, false, ledger_id});
  return Status::ok();
}

Status SimDeviceMemory::set_access(DevicePtr address, uint64_t bytes) {
  auto fail = [&](Status s) { return std::move(s).with_context(rank_, -1, step(DeviceStep::kAccess)); };
  switch (context_.visit(FaultSite::kAccess, rank_)) {
    case SimContext::Visit::kDied: return context_.dead_status(rank_, step(DeviceStep::kAccess));
    case SimContext::Visit::kFault:
      return fail(cuda_error("CUDA_ERROR_INVALID_DEVICE", "cuMemSetAccess: injected fault (site access)"));
    case SimContext::Visit::kProceed: break;
  }
  auto& proc = world_.process(rank_);
  // Every granule of the range must be mapped; collect the mappings first so
  // a failure changes nothing.
  std::vector<DeviceWorld::Mapping*> covered;
  DevicePtr cursor = address;
  const DevicePtr end = address + bytes;
  while (cursor < end) {
    auto it = proc.mappings.upper_bound(cursor);
    if (it == proc.mappings.begin() || std::prev(it)->first + std::prev(it)->second.bytes <= cursor)
      return fail(cuda_error("CUDA_ERROR_INVALID_VALUE",
                             fmt::format("cuMemSetAccess({:#x}, {} bytes): {:#x} is not mapped", address, bytes,
                                         cursor)));
    --it;
    covered.push_back(&it->second);
    cursor = it->first + it->second.bytes;
  }
  const HostSpec& host = context_.host_of(rank_);
  const RankPlace& place = context_.place(rank_);
  for (DeviceWorld::Mapping* m : covered) {
    DeviceWorld::Physical* p = world_.physical(m->physical);
    ENGRAM_CHECK(p != nullptr);
    // A container that sees one GPU cannot name a peer GPU of its host: the
    // driver refuses access to memory living on a device it cannot see.
    // (FABRIC memory travels through the fabric and is exempt.)
    bool other_gpu_here = p->host == place.host && p->gpu != place.gpu;
    if (host.visible_gpus_per_rank == 1 && other_gpu_here && p->exportable_as == HandleType::kPosixFd) {
      coverage_probe<"sim: access refused, container sees one GPU">();
      return fail(cuda_error("CUDA_ERROR_INVALID_DEVICE",
                             fmt::format("cuMemSetAccess: the allocation lives on gpu {} of {}, but this "
                                         "container sees one GPU (gpu {}): run with all GPUs visible to every rank "
                                         "(e.g. NVIDIA_VISIBLE_DEVICES=all) or use FABRIC handles",
                                         p->gpu, host.name, place.gpu)));
    }
  }
  for (DeviceWorld::Mapping* m : covered) m->access = true;
  return Status::ok();
}

Status SimDeviceMemory::unmap(DevicePtr address, uint64_t bytes) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kUnmap));
  auto& proc = world_.process(rank_);
  auto it = proc.mappings.find(address);
  if (it == proc.mappings.end() || it->second.bytes != bytes)
    return std::move(cuda_error("CUDA_ERROR_INVALID_VALUE",
                                fmt::format("cuMemUnmap({:#x}, {} bytes): not a mapping of this process", address,
                                            bytes)))
        .with_context(rank_, -1, step(DeviceStep::kUnmap));
  context_.ledger().remove(ResourceKind::kMapping, it->second.ledger_id);
  uint64_t physical_id = it->second.physical;
  proc.mappings.erase(it);
  world_.drop_reference(physical_id);
  return Status::ok();
}

Status SimDeviceMemory::release(AllocationHandle allocation) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kRelease));
  auto& proc = world_.process(rank_);
  auto it = proc.handles.find(allocation);
  if (it == proc.handles.end())
    return std::move(cuda_error("CUDA_ERROR_INVALID_VALUE",
                                fmt::format("cuMemRelease({:#x}): not a live allocation handle", allocation)))
        .with_context(rank_, -1, step(DeviceStep::kRelease));
  context_.ledger().remove(it->second.imported ? ResourceKind::kImportedHandle : ResourceKind::kAllocation,
                           it->second.ledger_id);
  uint64_t physical_id = it->second.physical;
  proc.handles.erase(it);
  world_.drop_reference(physical_id);
  return Status::ok();
}

Status SimDeviceMemory::free_reservation(DevicePtr address, uint64_t bytes) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kFreeReservation));
  auto& proc = world_.process(rank_);
  auto it = proc.reservations.find(address);
  auto fail = [&](std::string why) {
    return std::move(cuda_error("CUDA_ERROR_INVALID_VALUE",
                                fmt::format("cuMemAddressFree({:#x}, {} bytes): {}", address, bytes, why)))
        .with_context(rank_, -1, step(DeviceStep::kFreeReservation));
  };
  if (it == proc.reservations.end() || it->second.bytes != bytes) return fail("not a reservation of this process");
  auto m = proc.mappings.lower_bound(address);
  if (m != proc.mappings.end() && m->first < address + bytes) return fail("the range still has mappings");
  context_.ledger().remove(ResourceKind::kReservation, it->second.ledger_id);
  proc.reservations.erase(it);
  return Status::ok();
}

Status SimDeviceMemory::close_fd(int fd) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kCloseFd));
  return world_.close_fd(rank_, fd);
}

Status SimDeviceMemory::for_each_span(
    DevicePtr address, uint64_t bytes, const char* call,
    const std::function<void(DeviceWorld::Physical&, uint64_t, uint64_t, uint64_t)>& fn) {
  auto& proc = world_.process(rank_);
  // Check the whole range first, so a bad copy writes nothing.
  struct Piece {
    DeviceWorld::Physical* physical;
    uint64_t offset, length, done;
  };
  std::vector<Piece> pieces;
  uint64_t done = 0;
  while (done < bytes) {
    DevicePtr cursor = address + done;
    auto it = proc.mappings.upper_bound(cursor);
    if (it == proc.mappings.begin() || std::prev(it)->first + std::prev(it)->second.bytes <= cursor)
      return std::move(cuda_error("CUDA_ERROR_ILLEGAL_ADDRESS",
                                  fmt::format("{}: {:#x} is not mapped in this process", call, cursor)))
          .with_context(rank_, -1, call);
    --it;
    if (!it->second.access)
      return std::move(cuda_error("CUDA_ERROR_ILLEGAL_ADDRESS",
                                  fmt::format("{}: {:#x} is mapped but access was never granted "
                                              "(cuMemSetAccess); on hardware this hangs or faults",
                                              call, cursor)))
          .with_context(rank_, -1, call);
    uint64_t offset = cursor - it->first;
    uint64_t length = std::min(bytes - done, it->second.bytes - offset);
    pieces.push_back({world_.physical(it->second.physical), offset, length, done});
    done += length;
  }
  for (const Piece& piece : pieces) fn(*piece.physical, piece.offset, piece.length, piece.done);
  return Status::ok();
}

Status SimDeviceMemory::copy_to_device(DevicePtr dst, std::span<const std::byte> src) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kCopyToDevice));
  return for_each_span(dst, src.size(), step(DeviceStep::kCopyToDevice),
                       [&](DeviceWorld::Physical& p, uint64_t offset, uint64_t length, uint64_t done) {
                         p.contents.write(offset, src.subspan(done, length));
                       });
}

Status SimDeviceMemory::copy_from_device(std::span<std::byte> dst, DevicePtr src) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kCopyFromDevice));
  return for_each_span(src, dst.size(), step(DeviceStep::kCopyFromDevice),
                       [&](DeviceWorld::Physical& p, uint64_t offset, uint64_t length, uint64_t done) {
                         p.contents.read(offset, dst.subspan(done, length));
                       });
}

Status SimDeviceMemory::zero(DevicePtr dst, uint64_t bytes) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kCopyToDevice));
  return for_each_span(dst, bytes, step(DeviceStep::kCopyToDevice),
                       [&](DeviceWorld::Physical& p, uint64_t offset, uint64_t length, uint64_t) {
                         p.contents.zero(offset, length);
                       });
}

SharedBytes DeviceWorld::shared_content(const std::string& key, uint64_t bytes,
                                        const std::function<void(std::span<std::byte>)>& make) {
  if (auto it = shared_content_.find(key); it != shared_content_.end()) {
    ENGRAM_CHECK(it->second->size() == bytes);
    return it->second;
  }
  if (shared_content_bytes_ + bytes > kSharedContentBytesMax) return nullptr;
  auto data = std::make_shared<std::vector<std::byte>>(bytes);
  make(*data);
  shared_content_bytes_ += bytes;
  return shared_content_[key] = std::move(data);
}

std::shared_ptr<const DeviceWorld::SortedIds> DeviceWorld::sorted_ids(const SharedBytes& ids) {
  ENGRAM_CHECK(ids != nullptr);
  IdsIndex& entry = sorted_ids_[ids.get()];
  // The same address can be a later buffer's once the first is freed.
  if (entry.sorted && entry.ids.lock() == ids) return entry.sorted;
  const uint64_t words = ids->size() / 8;
  ENGRAM_CHECK(words <= UINT32_MAX);
  auto sorted = std::make_shared<SortedIds>();
  sorted->reserve(words);
  for (uint64_t w = 0; w < words; ++w) {
    int64_t id = 0;
    std::memcpy(&id, ids->data() + w * 8, 8);
    // DEAD padding and header words name no row: a row range never holds them.
    if (id >= 0) sorted->push_back({id, static_cast<uint32_t>(w)});
  }
  std::sort(sorted->begin(), sorted->end());
  entry = IdsIndex{ids, sorted};
  // Buffers come and go with every lookup: drop the entries of dead ones
  // whenever the map has doubled since the last sweep (amortised O(1), with
  // as many live buffers as there are collective groups).
  if (sorted_ids_.size() > sorted_ids_sweep_at_) {
    std::erase_if(sorted_ids_, [](const auto& e) { return e.second.ids.expired(); });
    sorted_ids_sweep_at_ = std::max<size_t>(16, 2 * sorted_ids_.size());
  }
  return sorted;
}

Status SimDeviceMemory::copy_to_device_shared(DevicePtr dst, const SharedBytes& data) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kCopyToDevice));
  return for_each_span(dst, data->size(), step(DeviceStep::kCopyToDevice),
                       [&](DeviceWorld::Physical& p, uint64_t offset, uint64_t length, uint64_t done) {
                         p.contents.share(offset, data, done, length);
                       });
}

Result<std::optional<SharedView>> SimDeviceMemory::shared_view(DevicePtr src, uint64_t bytes) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kCopyFromDevice));
  std::optional<SharedView> view;
  ENGRAM_RETURN_IF_ERROR(for_each_span(src, bytes, step(DeviceStep::kCopyFromDevice),
                                       [&](DeviceWorld::Physical& p, uint64_t offset, uint64_t length, uint64_t done) {
                                         if (done == 0 && length == bytes) view = p.contents.shared_view(offset, length);
                                       }));
  return view;
}

Status SimDeviceMemory::for_each_written(DevicePtr src, uint64_t bytes,
                                         const std::function<void(uint64_t, std::span<const std::byte>)>& fn) {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kCopyFromDevice));
  return for_each_span(src, bytes, step(DeviceStep::kCopyFromDevice),
                       [&](DeviceWorld::Physical& p, uint64_t offset, uint64_t length, uint64_t done) {
                         p.contents.for_each_written(offset, length, [&](uint64_t at, std::span<const std::byte> part) {
                           fn(done + (at - offset), part);
                         });
                       });
}

Status SimDeviceMemory::synchronize() {
  if (context_.is_dead(rank_)) return context_.dead_status(rank_, step(DeviceStep::kSynchronize));
  return Status::ok();
}

}  // namespace engram::sim
