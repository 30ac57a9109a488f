// Finding and removing segments a crashed run left behind. A segment is
// stale when the process recorded as its creator is gone; one whose creator
// still runs is in use and is never removed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace engram::shm {

struct SegmentRecord {
  std::string name;
  std::string path;
  uint64_t file_bytes = 0;
  bool header_valid = false;
  int64_t creator_pid = -1;
  bool creator_alive = false;
  bool stale() const { return !creator_alive; }
  std::string describe() const;  // one line for logs
};

// Segments in `root_dir` whose names start with `prefix` (job_segment_prefix()).
Result<std::vector<SegmentRecord>> list_segments(const std::string& root_dir, const std::string& prefix);

// Removes the stale ones and returns what it removed; in-use segments stay.
Result<std::vector<SegmentRecord>> remove_stale_segments(const std::string& root_dir, const std::string& prefix);

}  // namespace engram::shm
