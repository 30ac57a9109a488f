#include "sim/fiber_stack_room.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/base/units.h"

namespace engram::sim {
namespace {

// Maps and address space the run takes beside the stacks (the heap's mmap'ed
// chunks, the tables' buffers), measured on the scale benchmark with room to spare.
constexpr uint64_t kOtherMaps = 1024;
constexpr uint64_t kOtherAddressSpaceBytes = uint64_t{256} << 20;

}  // namespace

ProcessMapRoom this_process_map_room() {
  ProcessMapRoom room;
  {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) ++room.maps_now;
  }
  std::ifstream("/proc/sys/vm/max_map_count") >> room.max_map_count;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) room.address_space_now_bytes = std::stoull(line.substr(7)) * 1024;
  }
  struct rlimit rl{};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) room.address_space_limit_bytes = rl.rlim_cur;
  return room;
}

Status check_room_for_fiber_stacks(int rank_count, size_t stack_bytes, const ProcessMapRoom& room) {
  const uint64_t ranks = static_cast<uint64_t>(rank_count);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t stack_maps = 2 * ranks;
  if (room.max_map_count > 0 && room.maps_now + stack_maps + kOtherMaps > room.max_map_count) {
    const uint64_t wanted = room.maps_now + stack_maps + kOtherMaps;
    return resource_exhausted(fmt::format(
        "the emulator cannot run {} ranks here: their fiber stacks map {} regions (a stack and a guard page per "
        "rank), this process maps {} already and needs about {} more for the rest of the run, {} in all, but "
        "vm.max_map_count is {}; raise it (sysctl -w vm.max_map_count={}) or emulate fewer ranks (at most about {} "
        "here)",
        rank_count, stack_maps, room.maps_now, kOtherMaps, wanted, room.max_map_count, wanted,
        room.max_map_count > room.maps_now + kOtherMaps ? (room.max_map_count - room.maps_now - kOtherMaps) / 2 : 0));
  }
  const uint64_t stack_region_bytes = ranks * (stack_bytes + page);
  if (room.address_space_limit_bytes > 0 &&
      room.address_space_now_bytes + stack_region_bytes + kOtherAddressSpaceBytes > room.address_space_limit_bytes) {
    const uint64_t wanted = room.address_space_now_bytes + stack_region_bytes + kOtherAddressSpaceBytes;
    return resource_exhausted(fmt::format(
        "the emulator cannot run {} ranks here: their fiber stacks reserve {} of address space ({} KiB + a guard "
        "page per rank), this process uses {} already and needs about {} more, {} ({} bytes) in all, but RLIMIT_AS "
        "is {} ({} bytes); raise it (ulimit -v {}) or emulate fewer ranks",
        rank_count, format_gib(stack_region_bytes), stack_bytes / 1024, format_gib(room.address_space_now_bytes),
        format_gib(kOtherAddressSpaceBytes), format_gib(wanted), wanted, format_gib(room.address_space_limit_bytes),
        room.address_space_limit_bytes, (wanted + 1023) / 1024));
  }
  return Status::ok();
}

}  // namespace engram::sim
