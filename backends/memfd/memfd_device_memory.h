// DeviceMemory over host memory, for real processes on a machine without a
// GPU: an allocation is a memfd, a POSIX export hands out a dup of it, an
// import keeps a dup of the received fd, a reservation is a PROT_NONE range
// and a map is an mmap(MAP_SHARED | MAP_FIXED) of the memfd into it, with no
// access until set_access (as with the driver, a read before it faults).
// So the real handle exchange (core/exchange/handle_exchange.h) runs on real
// processes with real fds over the real Unix-socket channel: what the
// emulator cannot show (paths, credentials, fd lifetimes) is tested in CI.
// FABRIC handles do not exist here: probe_fabric and a FABRIC create answer
// failed_precondition. One instance per process; not thread-safe.
#pragma once

#include <cstdint>
#include <map>

#include "core/backend/device_memory.h"

namespace engram::memfd {

struct MemfdLiveCounts {
  int allocations = 0;   // created or imported, not yet released
  int reservations = 0;
  int mappings = 0;
  bool operator==(const MemfdLiveCounts&) const = default;
};

class MemfdDeviceMemory final : public DeviceMemory {
 public:
  // 2 MiB: the VMM granularity of Hopper and Blackwell, so sizes round as on a GPU.
  static constexpr uint64_t kDefaultGranularityBytes = uint64_t{2} << 20;

  // posix_fd_supported = false: a device that reports no POSIX fd handles
  // (info() says so, a POSIX create is refused), so the no-export fallback
  // runs on real processes too.
  explicit MemfdDeviceMemory(uint64_t granularity_bytes = kDefaultGranularityBytes, bool posix_fd_supported = true);
  // Undoes whatever is still live (a test that leaked is told by live_counts()).
  ~MemfdDeviceMemory() override;
  MemfdDeviceMemory(const MemfdDeviceMemory&) = delete;
  MemfdDeviceMemory& operator=(const MemfdDeviceMemory&) = delete;

  Result<DeviceInfo> info() override;
  Status probe_fabric() override;
  Result<AllocationHandle> create(uint64_t bytes, HandleType exportable_as) override;
  Result<ShareableHandle> export_handle(AllocationHandle allocation, HandleType type) override;
  Result<AllocationHandle> import_handle(const ShareableHandle& handle) override;
  Result<DevicePtr> reserve(uint64_t bytes) override;
  Status map(DevicePtr address, uint64_t bytes, AllocationHandle allocation) override;
  Status set_access(DevicePtr address, uint64_t bytes) override;
  Status unmap(DevicePtr address, uint64_t bytes) override;
  Status release(AllocationHandle allocation) override;
  Status free_reservation(DevicePtr address, uint64_t bytes) override;
  Status close_fd(int fd) override;
  Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) override;
  Status copy_from_device(std::span<std::byte> dst, DevicePtr src) override;
  Status synchronize() override;

  // What is live now: zero of each after a clean teardown or a failed step.
  MemfdLiveCounts live_counts() const;

 private:
  struct Allocation {
    int fd = -1;          // owned: the memfd (created) or a dup of the received fd (imported)
    uint64_t bytes = 0;
    bool exportable = true;  // false: created as kNone, plain memory
  };
  struct Mapping {
    uint64_t bytes = 0;
    bool accessible = false;
  };
  // The reservation holding [address, address + bytes), or end().
  std::map<DevicePtr, uint64_t>::const_iterator reservation_of(DevicePtr address, uint64_t bytes) const;
  // True when [address, address + bytes) lies in mapped, accessible ranges.
  bool accessible(DevicePtr address, uint64_t bytes) const;

  uint64_t granularity_bytes_;
  bool posix_fd_supported_;
  AllocationHandle next_handle_ = 1;
  std::map<AllocationHandle, Allocation> allocations_;
  std::map<DevicePtr, uint64_t> reservations_;  // start -> bytes
  std::map<DevicePtr, Mapping> mappings_;       // start -> mapping
};

}  // namespace engram::memfd
