// Puts the emulator's heap in huge pages before a large run. An emulated
// rank's state is ~80 KiB of small objects (ledger slots, mappings, plans,
// shared facts); at 9,216 ranks that is ~750 MiB touched one 4 KiB page at a
// time, and on a VM each first touch is a trap (5-10 us here): a quarter of a
// 1,152-rank start went to page faults. With the heap's pages in 2 MiB units
// there are 512 times fewer.
#pragma once

#include <cstdint>

namespace engram::sim {

// Grows the heap by `bytes` (rounded up to 2 MiB) marked MADV_HUGEPAGE and
// hands it back to malloc, which keeps it (the trim threshold is raised) and
// serves the run's allocations from it. Process-wide and idempotent: only
// growth beyond what earlier calls reserved is new. A hint: without
// transparent huge pages (or under AddressSanitizer, whose allocator is its
// own) it does nothing harmful and nothing useful.
void reserve_heap_in_huge_pages(uint64_t bytes);

}  // namespace engram::sim
