#include "core/backend/device_memory.h"

namespace engram {

const char* handle_type_name(HandleType type) {
  switch (type) {
    case HandleType::kPosixFd: return "posix_fd";
    case HandleType::kFabric: return "fabric";
  }
  return "unknown";
}

}  // namespace engram
