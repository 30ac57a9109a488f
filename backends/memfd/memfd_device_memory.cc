#include "backends/memfd/memfd_device_memory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace engram::memfd {
namespace {

Status fail(ErrorCode code, DeviceStep step, std::string message) {
  return Status(code, "memfd device memory: " + std::move(message), {-1, -1, device_step_name(step)});
}

Status fail_errno(DeviceStep step, const char* call, int error) {
  const ErrorCode code = (error == ENOMEM || error == EMFILE || error == ENFILE || error == ENOSPC)
                             ? ErrorCode::kResourceExhausted
                             : ErrorCode::kInternal;
  return fail(code, step, fmt::format("{} failed: {}", call, std::strerror(error)));
}

void* as_pointer(DevicePtr address) { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }

}  // namespace

MemfdDeviceMemory::MemfdDeviceMemory(uint64_t granularity_bytes, bool posix_fd_supported)
    : granularity_bytes_(granularity_bytes), posix_fd_supported_(posix_fd_supported) {
  const auto page_bytes = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  ENGRAM_CHECK_MSG(granularity_bytes_ >= page_bytes && granularity_bytes_ % page_bytes == 0,
                   "the granularity must be a whole number of pages");
}

MemfdDeviceMemory::~MemfdDeviceMemory() {
  for (const auto& [address, bytes] : reservations_) ::munmap(as_pointer(address), bytes);
  for (const auto& [handle, allocation] : allocations_) ::close(allocation.fd);
}

Result<DeviceInfo> MemfdDeviceMemory::info() {
  DeviceInfo info;
  info.ordinal = 0;
  info.name = "memfd (host memory standing in for a GPU)";
  const auto pages = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES));
  const auto page_bytes = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  info.memory_bytes_total = pages * page_bytes;
  info.memory_bytes_free = static_cast<uint64_t>(::sysconf(_SC_AVPHYS_PAGES)) * page_bytes;
  info.vmm_supported = true;
  info.posix_fd_supported = posix_fd_supported_;
  info.fabric_attribute = false;
  info.granularity_bytes = granularity_bytes_;
  return info;
}

Status MemfdDeviceMemory::probe_fabric() {
  return fail(ErrorCode::kFailedPrecondition, DeviceStep::kProbeFabric,
              "no FABRIC handles: host memory has no NVLink/IMEX domain");
}

Result<AllocationHandle> MemfdDeviceMemory::create(uint64_t bytes, HandleType exportable_as) {
  // kNone is a memfd too (nothing tells it apart until an export is refused).
  if (exportable_as == HandleType::kFabric) {
    return fail(ErrorCode::kFailedPrecondition, DeviceStep::kCreate,
                fmt::format("cannot create memory exportable as {}; only {} and {} exist here",
                            handle_type_name(exportable_as), handle_type_name(HandleType::kPosixFd),
                            handle_type_name(HandleType::kNone)));
  }
  if (exportable_as == HandleType::kPosixFd && !posix_fd_supported_) {
    return fail(ErrorCode::kFailedPrecondition, DeviceStep::kCreate,
                "cannot create memory exportable as posix_fd: this device was opened without POSIX fd handles");
  }
  if (bytes == 0 || bytes % granularity_bytes_ != 0) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kCreate,
                fmt::format("{} bytes is not a positive multiple of the granularity ({} bytes)", bytes,
                            granularity_bytes_));
  }
  const int fd = ::memfd_create("engramlab-device", MFD_CLOEXEC);
  if (fd < 0) return fail_errno(DeviceStep::kCreate, "memfd_create", errno);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    ::close(fd);
    return fail_errno(DeviceStep::kCreate, "ftruncate", error);
  }
  const AllocationHandle handle = next_handle_++;
  allocations_.emplace(handle, Allocation{fd, bytes, exportable_as == HandleType::kPosixFd});
  return handle;
}

Result<ShareableHandle> MemfdDeviceMemory::export_handle(AllocationHandle allocation, HandleType type) {
  const auto it = allocations_.find(allocation);
  if (it == allocations_.end()) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kExport, fmt::format("no allocation {}", allocation));
  }
  if (type != HandleType::kPosixFd || !it->second.exportable) {
    return fail(ErrorCode::kFailedPrecondition, DeviceStep::kExport,
                fmt::format("cannot export as {}{}", handle_type_name(type),
                            it->second.exportable ? "" : ": the allocation was created as plain memory (none)"));
  }
  const int fd = ::fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return fail_errno(DeviceStep::kExport, "fcntl(F_DUPFD_CLOEXEC)", errno);
  ShareableHandle handle;
  handle.type = HandleType::kPosixFd;
  handle.fd = fd;
  return handle;
}

Result<AllocationHandle> MemfdDeviceMemory::import_handle(const ShareableHandle& handle) {
  if (handle.type != HandleType::kPosixFd) {
    return fail(ErrorCode::kFailedPrecondition, DeviceStep::kImport,
                fmt::format("cannot import a {} handle", handle_type_name(handle.type)));
  }
  struct stat st{};
  if (handle.fd < 0 || ::fstat(handle.fd, &st) != 0) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kImport,
                fmt::format("fd {} is not an open file descriptor", handle.fd));
  }
  const auto bytes = static_cast<uint64_t>(st.st_size);
  if (!S_ISREG(st.st_mode) || bytes == 0 || bytes % granularity_bytes_ != 0) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kImport,
                fmt::format("fd {} is not an exported allocation ({} bytes, granularity {})", handle.fd, bytes,
                            granularity_bytes_));
  }
  // The caller closes handle.fd after import, as with the driver: keep our own reference.
  const int fd = ::fcntl(handle.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return fail_errno(DeviceStep::kImport, "fcntl(F_DUPFD_CLOEXEC)", errno);
  const AllocationHandle imported = next_handle_++;
  allocations_.emplace(imported, Allocation{fd, bytes});
  return imported;
}

Result<DevicePtr> MemfdDeviceMemory::reserve(uint64_t bytes) {
  if (bytes == 0 || bytes % granularity_bytes_ != 0) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kReserve,
                fmt::format("{} bytes is not a positive multiple of the granularity ({} bytes)", bytes,
                            granularity_bytes_));
  }
  // Aligned to the granularity, as the driver's reservations are: take one
  // granule more and trim both ends.
  const uint64_t padded_bytes = bytes + granularity_bytes_;
  void* range = ::mmap(nullptr, padded_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return fail_errno(DeviceStep::kReserve, "mmap(PROT_NONE)", errno);
  const auto start = static_cast<DevicePtr>(reinterpret_cast<uintptr_t>(range));
  const DevicePtr address = (start + granularity_bytes_ - 1) / granularity_bytes_ * granularity_bytes_;
  if (address > start) ::munmap(range, address - start);
  if (start + padded_bytes > address + bytes) ::munmap(as_pointer(address + bytes), start + padded_bytes - address - bytes);
  reservations_.emplace(address, bytes);
  return address;
}

std::map<DevicePtr, uint64_t>::const_iterator MemfdDeviceMemory::reservation_of(DevicePtr address,
                                                                                 uint64_t bytes) const {
  auto it = reservations_.upper_bound(address);
  if (it == reservations_.begin()) return reservations_.end();
  --it;
  const bool inside = address >= it->first && bytes <= it->second && address - it->first <= it->second - bytes;
  return inside ? it : reservations_.end();
}

Status MemfdDeviceMemory::map(DevicePtr address, uint64_t bytes, AllocationHandle allocation) {
  const auto it = allocations_.find(allocation);
  if (it == allocations_.end()) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kMap, fmt::format("no allocation {}", allocation));
  }
  if (bytes == 0 || bytes > it->second.bytes || bytes % granularity_bytes_ != 0 || address % granularity_bytes_ != 0) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kMap,
                fmt::format("cannot map {} bytes of a {}-byte allocation at {:#x} (granularity {})", bytes,
                            it->second.bytes, address, granularity_bytes_));
  }
  if (reservation_of(address, bytes) == reservations_.end()) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kMap,
                fmt::format("[{:#x}, +{}) lies in no reservation", address, bytes));
  }
  // Overlap with a live mapping: the driver refuses it, so do we.
  auto next = mappings_.lower_bound(address);
  const bool overlaps_next = next != mappings_.end() && next->first < address + bytes;
  const bool overlaps_prev = next != mappings_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > address;
  if (overlaps_next || overlaps_prev) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kMap,
                fmt::format("[{:#x}, +{}) overlaps a live mapping", address, bytes));
  }
  void* at = ::mmap(as_pointer(address), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, it->second.fd, 0);
  if (at == MAP_FAILED) return fail_errno(DeviceStep::kMap, "mmap(MAP_SHARED | MAP_FIXED)", errno);
  mappings_.emplace(address, Mapping{bytes, false});
  return Status::ok();
}

Status MemfdDeviceMemory::set_access(DevicePtr address, uint64_t bytes) {
  // Every mapping in the range becomes readable and writable; the range must be all mapped.
  uint64_t covered = 0;
  for (auto it = mappings_.lower_bound(address); it != mappings_.end() && it->first < address + bytes; ++it) {
    if (it->first != address + covered) break;
    covered += it->second.bytes;
  }
  if (bytes == 0 || covered < bytes) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kAccess,
                fmt::format("[{:#x}, +{}) is not wholly mapped", address, bytes));
  }
  if (::mprotect(as_pointer(address), bytes, PROT_READ | PROT_WRITE) != 0) {
    return fail_errno(DeviceStep::kAccess, "mprotect", errno);
  }
  for (auto it = mappings_.lower_bound(address); it != mappings_.end() && it->first < address + bytes; ++it) {
    it->second.accessible = true;
  }
  return Status::ok();
}

Status MemfdDeviceMemory::unmap(DevicePtr address, uint64_t bytes) {
  const auto it = mappings_.find(address);
  if (it == mappings_.end() || it->second.bytes != bytes) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kUnmap,
                fmt::format("no mapping of {} bytes at {:#x}", bytes, address));
  }
  // Back to a hole of the reservation, so the range stays ours until freed.
  void* at = ::mmap(as_pointer(address), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (at == MAP_FAILED) return fail_errno(DeviceStep::kUnmap, "mmap(PROT_NONE | MAP_FIXED)", errno);
  mappings_.erase(it);
  return Status::ok();
}

Status MemfdDeviceMemory::release(AllocationHandle allocation) {
  const auto it = allocations_.find(allocation);
  if (it == allocations_.end()) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kRelease, fmt::format("no allocation {}", allocation));
  }
  // A live mapping keeps the memory, as the driver does; only our handle goes.
  ::close(it->second.fd);
  allocations_.erase(it);
  return Status::ok();
}

Status MemfdDeviceMemory::free_reservation(DevicePtr address, uint64_t bytes) {
  const auto it = reservations_.find(address);
  if (it == reservations_.end() || it->second != bytes) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kFreeReservation,
                fmt::format("no reservation of {} bytes at {:#x}", bytes, address));
  }
  auto mapped = mappings_.lower_bound(address);
  if (mapped != mappings_.end() && mapped->first < address + bytes) {
    return fail(ErrorCode::kFailedPrecondition, DeviceStep::kFreeReservation,
                fmt::format("the reservation at {:#x} still holds a mapping at {:#x}; unmap first", address,
                            mapped->first));
  }
  if (::munmap(as_pointer(address), bytes) != 0) return fail_errno(DeviceStep::kFreeReservation, "munmap", errno);
  reservations_.erase(it);
  return Status::ok();
}

Status MemfdDeviceMemory::close_fd(int fd) {
  if (::close(fd) != 0) return fail_errno(DeviceStep::kCloseFd, "close", errno);
  return Status::ok();
}

bool MemfdDeviceMemory::accessible(DevicePtr address, uint64_t bytes) const {
  auto it = mappings_.upper_bound(address);
  if (it == mappings_.begin()) return false;
  --it;
  uint64_t at = address;
  const uint64_t end = address + bytes;
  for (; it != mappings_.end() && at < end; ++it) {
    if (it->first > at || it->first + it->second.bytes <= at || !it->second.accessible) return false;
    at = it->first + it->second.bytes;
  }
  return at >= end;
}

Status MemfdDeviceMemory::copy_to_device(DevicePtr dst, std::span<const std::byte> src) {
  if (!accessible(dst, src.size())) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kCopyToDevice,
                fmt::format("[{:#x}, +{}) is not mapped with access granted", dst, src.size()));
  }
  std::memcpy(as_pointer(dst), src.data(), src.size());
  return Status::ok();
}

Status MemfdDeviceMemory::copy_from_device(std::span<std::byte> dst, DevicePtr src) {
  if (!accessible(src, dst.size())) {
    return fail(ErrorCode::kInvalidArgument, DeviceStep::kCopyFromDevice,
                fmt::format("[{:#x}, +{}) is not mapped with access granted", src, dst.size()));
  }
  std::memcpy(dst.data(), as_pointer(src), dst.size());
  return Status::ok();
}

Status MemfdDeviceMemory::synchronize() { return Status::ok(); }

MemfdLiveCounts MemfdDeviceMemory::live_counts() const {
  return {static_cast<int>(allocations_.size()), static_cast<int>(reservations_.size()),
          static_cast<int>(mappings_.size())};
}

}  // namespace engram::memfd
