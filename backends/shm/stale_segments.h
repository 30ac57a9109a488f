// Finding and removing segments a crashed run left behind. A segment is
// stale when it carries engramlab's header, belongs to us, and the process
// recorded as its creator is gone. Anything else under an engramlab name (a
// file without our header, another user's file, a FIFO or device) is listed
// and never removed, and is looked at without blocking.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace engram::shm {

struct SegmentRecord {
  std::string name;
  std::string path;
  std::string kind = "regular file";  // what the name holds when it is not a regular file
  uint64_t file_bytes = 0;
  uid_t owner_uid = 0;
  bool header_valid = false;
  int64_t creator_pid = -1;
  bool creator_alive = false;
  bool regular() const { return kind == "regular file"; }
  bool stale() const;
  std::string describe() const;  // one line for logs
};

// Entries of `root_dir` whose names start with `prefix` (job_segment_prefix()).
// A missing `root_dir` is kNotFound.
Result<std::vector<SegmentRecord>> list_segments(const std::string& root_dir, const std::string& prefix);

// Removes the stale ones and returns what it removed; everything else stays.
Result<std::vector<SegmentRecord>> remove_stale_segments(const std::string& root_dir, const std::string& prefix);

}  // namespace engram::shm
