// Finding and removing segments a crashed run left behind. A segment is
// stale when it carries engramlab's header, belongs to us, and provably no
// process holds it any more (segment_liveness.h: a lock, never a pid). Anything else under an engramlab name (a
// file without our header, another user's file, a FIFO or device) is listed
// and never removed, and is looked at without blocking.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
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
  // Not provably unused (segment_liveness.h): in use, or cannot be told.
  bool creator_alive = false;
  std::string liveness;  // why: "in use: ...", "stale: ...", "kept: ..."
  bool regular() const { return kind == "regular file"; }
  bool stale() const;
  std::string describe() const;  // one line for logs
};

// Which names a listing takes: every job's (all names starting
// "engramlab-", so a stranger's file under our name is listed too), or
// exactly one job's segment names (is_job_segment_name: job "a" never takes
// job "a-b"'s).
struct SegmentScope {
  std::string job_id;  // empty: every job
  static SegmentScope every_job() { return {}; }
  static SegmentScope of_job(std::string job_id) { return {std::move(job_id)}; }
  bool takes(std::string_view name) const;
};

// Entries of `root_dir` in `scope`. A missing `root_dir` is kNotFound.
Result<std::vector<SegmentRecord>> list_segments(const std::string& root_dir, const SegmentScope& scope);

// Removes the stale ones and returns what it removed; everything else stays.
Result<std::vector<SegmentRecord>> remove_stale_segments(const std::string& root_dir, const SegmentScope& scope);

}  // namespace engram::shm
