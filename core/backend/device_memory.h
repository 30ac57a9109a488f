// Device memory as the CUDA driver's VMM API sees it: create exportable
// physical memory, export/import a shareable handle, reserve an address range,
// map, grant access, and undo each. Implemented by backends/cuda (the real
// driver) and sim/ (the emulator), each with the real error behaviour.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <optional>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace engram {

enum class HandleType : uint8_t {
  kPosixFd,  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: one host only
  kFabric,   // CU_MEM_HANDLE_TYPE_FABRIC: one NVLink/IMEX domain, needs an IMEX channel
  // CU_MEM_HANDLE_TYPE_NONE: plain memory no other process can import, for a
  // consumer that can live without sharing where neither type above works.
  kNone,
};
const char* handle_type_name(HandleType type);
// The name handle_type_name gives, back to the type; nullopt for any other text.
std::optional<HandleType> parse_handle_type(std::string_view name);
// "posix_fd, fabric or none": every name, for messages.
const char* handle_type_choices();

inline constexpr size_t kFabricHandleBytes = 64;  // sizeof(CUmemFabricHandle)

struct ShareableHandle {
  HandleType type = HandleType::kPosixFd;
  int fd = -1;                                        // kPosixFd: owned by this process
  std::array<uint8_t, kFabricHandleBytes> fabric{};   // kFabric
};

struct DeviceInfo {
  int ordinal = -1;
  std::string name;                 // "NVIDIA H200"
  uint64_t memory_bytes_total = 0;
  uint64_t memory_bytes_free = 0;
  bool vmm_supported = false;
  bool posix_fd_supported = false;
  bool fabric_attribute = false;    // what the attribute says; it can lie
  uint64_t granularity_bytes = 0;   // minimum VMM granularity (2 MiB on Hopper/Blackwell)
  // PCI bus id ("0000:3b:00.0"; "" where unknown): one GPU of a host, whatever
  // ordinal CUDA_VISIBLE_DEVICES gives it, so ranks sharing a GPU can tell.
  std::string bus_id;
};

using AllocationHandle = uint64_t;  // CUmemGenericAllocationHandle
using DevicePtr = uint64_t;         // CUdeviceptr

// The step each DeviceMemory call names in its errors (ErrorContext::step),
// one table for every backend: the real driver and the emulator report the
// same step for the same failing call (tests/device_steps.h checks both).
enum class DeviceStep : uint8_t {
  kOpen,            // a backend opening its device (not part of the interface)
  kInfo,
  kGranularity,     // a backend's granularity query (inside info() and create())
  kMemoryInfo,      // a backend's free/total query (inside info())
  kProbeFabric,
  kCreate,
  kExport,
  kImport,
  kReserve,
  kMap,
  kAccess,
  kUnmap,
  kRelease,
  kFreeReservation,
  kCloseFd,
  kCopyToDevice,
  kCopyFromDevice,
  kSynchronize,
};
inline constexpr int kDeviceStepCount = static_cast<int>(DeviceStep::kSynchronize) + 1;
// "open", "info", "granularity", "memory_info", "probe_fabric", "create",
// "export", "import", "reserve", "map", "access", "unmap", "release",
// "free_reservation", "close_fd", "copy_to_device", "copy_from_device",
// "synchronize".
const char* device_step_name(DeviceStep step);

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  virtual Result<DeviceInfo> info() = 0;
  // Creates and exports a granularity-sized FABRIC allocation and frees it:
  // ok only when both really work (an IMEX channel exists).
  virtual Status probe_fabric() = 0;

  // `bytes` must be a multiple of the granularity.
  virtual Result<AllocationHandle> create(uint64_t bytes, HandleType exportable_as) = 0;
  // A kPosixFd handle carries a new fd that the caller must close_fd().
  virtual Result<ShareableHandle> export_handle(AllocationHandle allocation, HandleType type) = 0;
  // Does not close handle.fd; the caller closes it after import.
  virtual Result<AllocationHandle> import_handle(const ShareableHandle& handle) = 0;
  virtual Result<DevicePtr> reserve(uint64_t bytes) = 0;
  virtual Status map(DevicePtr address, uint64_t bytes, AllocationHandle allocation) = 0;
  // Read/write access for this rank's device. Without it a real kernel hangs
  // or faults, so callers always grant it before use.
  virtual Status set_access(DevicePtr address, uint64_t bytes) = 0;
  virtual Status unmap(DevicePtr address, uint64_t bytes) = 0;
  virtual Status release(AllocationHandle allocation) = 0;
  virtual Status free_reservation(DevicePtr address, uint64_t bytes) = 0;
  virtual Status close_fd(int fd) = 0;

  // Host <-> device copies through a mapped, accessible address.
  virtual Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) = 0;
  virtual Status copy_from_device(std::span<std::byte> dst, DevicePtr src) = 0;
  virtual Status synchronize() = 0;
};

}  // namespace engram
