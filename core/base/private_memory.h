// Process-private memory for a host table's rows: an anonymous mapping that
// stays untouched until written, so a parallel fill faults its pages in on
// every thread (a zeroing constructor did it on one), marked for
// transparent huge pages (MADV_HUGEPAGE) where the kernel allows them, so a
// lookup's random rows miss the TLB far less often.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/base/status.h"

namespace engram {

class PrivateMemory {
 public:
  // `bytes` of zeroed memory (0 bytes: an empty span, nothing mapped).
  // resource_exhausted when the mapping is refused (address space, memory
  // limits), naming the size.
  static Result<PrivateMemory> map(uint64_t bytes);

  PrivateMemory() = default;
  PrivateMemory(PrivateMemory&& other) noexcept;
  PrivateMemory& operator=(PrivateMemory&& other) noexcept;
  PrivateMemory(const PrivateMemory&) = delete;
  PrivateMemory& operator=(const PrivateMemory&) = delete;
  ~PrivateMemory();  // unmaps

  std::span<std::byte> bytes() const { return {data_, bytes_}; }
  // Whether the kernel took the huge-page advice (false where THP is off or
  // the mapping is smaller than a huge page's worth of use).
  bool huge_pages_advised() const { return huge_pages_advised_; }

 private:
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  bool huge_pages_advised_ = false;
};

}  // namespace engram
