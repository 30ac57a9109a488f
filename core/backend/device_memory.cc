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

namespace {
constexpr HandleType kEveryHandleType[] = {HandleType::kPosixFd, HandleType::kFabric, HandleType::kNone};
}  // namespace

std::optional<HandleType> parse_handle_type(std::string_view name) {
  for (HandleType t : kEveryHandleType)
    if (name == handle_type_name(t)) return t;
  return std::nullopt;
}

const char* handle_type_choices() {
  static const std::string text = [] {
    std::string out;
    const size_t n = std::size(kEveryHandleType);
    for (size_t i = 0; i < n; ++i)
      out += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + handle_type_name(kEveryHandleType[i]);
    return out;
  }();
  return text.c_str();
}

}  // namespace engram
