// Whether this process has room for the emulator's fiber stacks, asked before
// a run starts. Each rank's stack is a slot of one region with a guard page
// below it, so N ranks map 2N regions (vm.max_map_count, 65,530 by default,
// caps that near 32,000 ranks) and reserve N x (stack + page) of address
// space (RLIMIT_AS). Past either, the run would abort midway: mprotect of a
// guard fails, or the region's mmap does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/status.h"

namespace engram::sim {

struct ProcessMapRoom {
  uint64_t maps_now = 0;       // lines of /proc/self/maps
  uint64_t max_map_count = 0;  // vm.max_map_count; 0 unknown
  uint64_t address_space_now_bytes = 0;    // VmSize
  uint64_t address_space_limit_bytes = 0;  // soft RLIMIT_AS; 0 unlimited
};

ProcessMapRoom this_process_map_room();

// resource_exhausted naming the limit, what the run needs and what there
// is, and the fix; ok when both fit.
Status check_room_for_fiber_stacks(int rank_count, size_t stack_bytes, const ProcessMapRoom& room);

}  // namespace engram::sim
