// The first page of every engramlab shm segment: who created it, for which
// size. It lets a reader check it maps what the writer made, and names the
// creator to a person; whether the segment is still in use is judged by the
// lock its users hold (segment_liveness.h), never by the pid recorded here.
#pragma once

#include <cstdint>
#include <string>

namespace engram::shm {

inline constexpr char kSegmentMagic[16] = "engramlab-shm-1";
// One page, so the table data that follows is page aligned.
inline constexpr uint64_t kSegmentHeaderBytes = 4096;
// SegmentHeader::holder_lock: every process that maps the segment holds an
// OFD read lock on it for the mapping's life (segment_liveness.h).
inline constexpr uint32_t kHolderLockOfd = 1;

struct SegmentHeader {
  char magic[16];
  uint64_t data_bytes;
  int64_t creator_pid;  // in the creator's PID namespace: for people, not for judging
  // /proc/<pid>/stat field 22 of the creator.
  uint64_t creator_start_ticks;
  char creator_boot_id[48];
  // Appended after the fields above, so segments from builds before them read
  // as 0 here: no lock held, namespace unknown.
  uint64_t creator_pid_namespace;  // inode of /proc/self/ns/pid; 0 unknown
  uint32_t holder_lock;            // kHolderLockOfd, or 0
};
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderBytes);

// `holds_lock`: the caller holds the OFD lock on the segment's fd already.
SegmentHeader make_header_for_this_process(uint64_t data_bytes, bool holds_lock);
bool header_is_valid(const SegmentHeader& header);

// 0 when /proc/<pid>/stat cannot be read.
uint64_t process_start_ticks(int64_t pid);
// The inode number of `/proc/self/ns/pid`; 0 when it cannot be read.
uint64_t this_pid_namespace();
std::string this_boot_id();

}  // namespace engram::shm
