#include "core/base/private_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/base/units.h"

namespace engram {

Result<PrivateMemory> PrivateMemory::map(uint64_t bytes) {
  PrivateMemory memory;
  if (bytes == 0) return memory;
  void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (at == MAP_FAILED) {
    const int error = errno;
    return Status(ErrorCode::kResourceExhausted,
                  fmt::format("mapping {} of private host memory for table rows failed ({}); free memory or raise "
                              "the process's limits (ulimit -v, the container's memory limit), or use a placement "
                              "that shares the table (host_shared)",
                              format_bytes(bytes), std::strerror(error)));
  }
  memory.data_ = static_cast<std::byte*>(at);
  memory.bytes_ = static_cast<size_t>(bytes);
  // Advice only: where THP is off ("never") the kernel refuses it, and the
  // rows live in 4 KiB pages as before.
  memory.huge_pages_advised_ = ::madvise(at, bytes, MADV_HUGEPAGE) == 0;
  return memory;
}

PrivateMemory::PrivateMemory(PrivateMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      huge_pages_advised_(std::exchange(other.huge_pages_advised_, false)) {}

PrivateMemory& PrivateMemory::operator=(PrivateMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    huge_pages_advised_ = std::exchange(other.huge_pages_advised_, false);
  }
  return *this;
}

PrivateMemory::~PrivateMemory() {
  if (data_ != nullptr) ::munmap(data_, bytes_);
}

}  // namespace engram
