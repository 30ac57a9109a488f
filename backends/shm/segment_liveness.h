// Whether an engramlab shm segment is still in use, judged so that every PID
// namespace sees the same answer: each process that maps a segment holds an
// OFD read lock on it (fcntl F_OFD_SETLK) for the mapping's life, and a
// segment is unused only when F_OFD_GETLK finds no such lock. The kernel
// drops the lock when its holder exits however it dies, and a lock is on the
// file, not on a pid, so a job in a container (another PID namespace) is seen
// as alive from the host and the other way round.
#pragma once

#include <string>

#include "backends/shm/segment_header.h"

namespace engram::shm {

enum class SegmentUse {
  kInUse,    // some process holds the lock
  kUnused,   // provably nobody: safe to remove
  kUnknown,  // cannot be proven either way: keep it
};

struct SegmentVerdict {
  SegmentUse use = SegmentUse::kUnknown;
  std::string reason;  // for people: "in use: ...", "stale: ...", "kept: ..."
};

// Takes the read lock on `fd` (open on the segment) that marks it in use
// until the fd is closed. false, errno set, where the filesystem has no OFD
// locks; the segment's header then says so and nobody judges it dead.
bool hold_segment_lock(int fd);

// `fd` is open on the segment (read-only is enough), `header` read from it.
SegmentVerdict judge_segment(int fd, const SegmentHeader& header);

}  // namespace engram::shm
