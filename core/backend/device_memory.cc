#include "core/backend/device_memory.h"

namespace engram {

const char* device_step_name(DeviceStep step) {
  switch (step) {
    case DeviceStep::kOpen: return "open";
    case DeviceStep::kInfo: return "info";
    case DeviceStep::kGranularity: return "granularity";
    case DeviceStep::kMemoryInfo: return "memory_info";
    case DeviceStep::kProbeFabric: return "probe_fabric";
    case DeviceStep::kCreate: return "create";
    case DeviceStep::kExport: return "export";
    case DeviceStep::kImport: return "import";
    case DeviceStep::kReserve: return "reserve";
    case DeviceStep::kMap: return "map";
    case DeviceStep::kAccess: return "access";
    case DeviceStep::kUnmap: return "unmap";
    case DeviceStep::kRelease: return "release";
    case DeviceStep::kFreeReservation: return "free_reservation";
    case DeviceStep::kCloseFd: return "close_fd";
    case DeviceStep::kCopyToDevice: return "copy_to_device";
    case DeviceStep::kCopyFromDevice: return "copy_from_device";
    case DeviceStep::kSynchronize: return "synchronize";
  }
  return "?";
}

const char* handle_type_name(HandleType type) {
  switch (type) {
    case HandleType::kPosixFd: return "posix_fd";
    case HandleType::kFabric: return "fabric";
    case HandleType::kNone: return "none";
  }
  return "unknown";
}

}  // namespace engram
