// The first page of every engramlab shm segment: who created it, for which
// size. It lets a later run tell a stale segment (creator dead) from one in
// use, and lets a reader check it maps what the writer made.
#pragma once

#include <cstdint>
#include <string>

namespace engram::shm {

inline constexpr char kSegmentMagic[16] = "engramlab-shm-1";
// One page, so the table data that follows is page aligned.
inline constexpr uint64_t kSegmentHeaderBytes = 4096;

struct SegmentHeader {
  char magic[16];
  uint64_t data_bytes;
  int64_t creator_pid;
  // /proc/<pid>/stat field 22: tells a live creator from a reused pid.
  uint64_t creator_start_ticks;
  char creator_boot_id[48];
};
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderBytes);

SegmentHeader make_header_for_this_process(uint64_t data_bytes);
bool header_is_valid(const SegmentHeader& header);

// 0 when /proc/<pid>/stat cannot be read.
uint64_t process_start_ticks(int64_t pid);
// Alive and the same process (start time matches where it can be read).
bool creator_is_alive(const SegmentHeader& header);

}  // namespace engram::shm
