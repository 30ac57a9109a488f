#include "backends/shm/stale_segments.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "backends/shm/segment_header.h"

namespace engram::shm {
namespace {
// A segment with no header yet is only unrecorded for the microseconds
// between open() and the header write; older than this, its creator died.
constexpr time_t kUnrecordedGraceSeconds = 10;
}  // namespace

std::string SegmentRecord::describe() const {
  std::string creator = header_valid ? "creator pid " + std::to_string(creator_pid) : "no creator record";
  return path + " (" + std::to_string(file_bytes) + " bytes, " + creator + ", " +
         (stale() ? "stale: creator gone" : "in use: creator running") + ")";
}

Result<std::vector<SegmentRecord>> list_segments(const std::string& root_dir, const std::string& prefix) {
  if (prefix.empty()) return invalid_argument("list_segments: empty prefix would match every segment; pass job_segment_prefix(job_id)");
  DIR* dir = ::opendir(root_dir.c_str());
  if (dir == nullptr) {
    const int err = errno;
    if (err == ENOENT) return std::vector<SegmentRecord>{};
    return failed_precondition("cannot list " + root_dir + ": " + std::strerror(err));
  }
  std::vector<SegmentRecord> records;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    SegmentRecord record;
    record.name = name;
    record.path = root_dir + "/" + name;
    const int fd = ::open(record.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // vanished meanwhile, or not a regular file we may read
    struct stat st{};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
      record.file_bytes = static_cast<uint64_t>(st.st_size);
      SegmentHeader header{};
      if (::pread(fd, &header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header)) && header_is_valid(header)) {
        record.header_valid = true;
        record.creator_pid = header.creator_pid;
        record.creator_alive = creator_is_alive(header);
      } else {
        record.creator_alive = (::time(nullptr) - st.st_mtime) < kUnrecordedGraceSeconds;
      }
      records.push_back(std::move(record));
    }
    ::close(fd);
  }
  ::closedir(dir);
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return records;
}

Result<std::vector<SegmentRecord>> remove_stale_segments(const std::string& root_dir, const std::string& prefix) {
  ENGRAM_ASSIGN_OR_RETURN(std::vector<SegmentRecord> records, list_segments(root_dir, prefix));
  std::vector<SegmentRecord> removed;
  for (auto& record : records) {
    if (!record.stale()) continue;
    if (::unlink(record.path.c_str()) != 0 && errno != ENOENT) {
      return Status(ErrorCode::kPermissionDenied,
                    "cannot remove stale segment " + record.describe() + ": " + std::strerror(errno),
                    {.step = "shm cleanup"});
    }
    removed.push_back(std::move(record));
  }
  return removed;
}

}  // namespace engram::shm
