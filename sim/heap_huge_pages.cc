#include "sim/heap_huge_pages.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdlib>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define ENGRAM_HEAP_IS_GLIBC 0
#else
#define ENGRAM_HEAP_IS_GLIBC 1
#endif

namespace engram::sim {

void reserve_heap_in_huge_pages(uint64_t bytes) {
#if ENGRAM_HEAP_IS_GLIBC
  constexpr uint64_t kHugeBytes = 2ull << 20;
  // malloc serves requests above its mmap threshold (32 MiB at most) with
  // their own mappings, which free() unmaps: grow the heap in pieces below it.
  constexpr uint64_t kPieceBytes = 16ull << 20;
  static uint64_t reserved_bytes = 0;
  if (bytes <= reserved_bytes) return;
  const uint64_t grow_bytes = (bytes - reserved_bytes + kPieceBytes - 1) / kPieceBytes * kPieceBytes;
  // Freed memory at the top of the heap stays there for the run's allocations
  // instead of going back to the kernel (and being faulted in again).
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(1u << 30));
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kPieceBytes * 2));
  std::vector<char*> pieces;
  for (uint64_t done = 0; done < grow_bytes; done += kPieceBytes) {
    char* piece = static_cast<char*>(std::malloc(kPieceBytes));
    if (piece == nullptr) break;
    pieces.push_back(piece);
  }
  for (char* piece : pieces) {
    // Whole huge pages inside the piece; pieces from brk are contiguous, but
    // each is advised alone in case they are not.
    const auto first = (reinterpret_cast<uintptr_t>(piece) + kHugeBytes - 1) & ~(kHugeBytes - 1);
    const auto last = (reinterpret_cast<uintptr_t>(piece) + kPieceBytes) & ~(kHugeBytes - 1);
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
  for (char* piece : pieces) std::free(piece);
  reserved_bytes += pieces.size() * kPieceBytes;
#else
  (void)bytes;
#endif
}

}  // namespace engram::sim
