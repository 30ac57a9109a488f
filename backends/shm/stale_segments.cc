#include "backends/shm/stale_segments.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backends/shm/segment_header.h"
#include "core/backend/host_shared_memory.h"
#include "backends/shm/segment_liveness.h"
#include "core/base/file_type.h"

namespace engram::shm {
namespace {

constexpr std::string_view kEveryJobPrefix = "engramlab-";

// Reads what `name` holds without following links and without blocking on a
// FIFO or a device: its type first, and only a regular file is opened.
SegmentRecord inspect(int dir_fd, const std::string& root_dir, const std::string& name) {
  SegmentRecord record;
  record.name = name;
  record.path = root_dir + "/" + name;
  struct stat st{};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    record.kind = std::string("unreadable entry (") + std::strerror(errno) + ")";
    return record;
  }
  record.owner_uid = st.st_uid;
  record.kind = file_type_name(st.st_mode);
  if (!S_ISREG(st.st_mode)) return record;
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    record.kind = std::string("unreadable file (") + std::strerror(errno) + ")";
    return record;
  }
  struct stat opened{};
  if (::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {  // swapped since the fstatat
    record.kind = file_type_name(opened.st_mode);
    ::close(fd);
    return record;
  }
  record.file_bytes = static_cast<uint64_t>(opened.st_size);
  SegmentHeader header{};
  if (::pread(fd, &header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header)) && header_is_valid(header)) {
    record.header_valid = true;
    record.creator_pid = header.creator_pid;
    const SegmentVerdict verdict = judge_segment(fd, header);
    record.creator_alive = verdict.use != SegmentUse::kUnused;
    record.liveness = verdict.reason;
  }
  ::close(fd);
  return record;
}

}  // namespace

bool SegmentRecord::stale() const {
  return regular() && header_valid && owner_uid == ::geteuid() && !creator_alive;
}

std::string SegmentRecord::describe() const {
  if (!regular()) return fmt::format("{} (a {}, not a segment: left alone)", path, kind);
  if (!header_valid) {
    return fmt::format("{} ({} bytes, no engramlab header: not made by engramlab, left alone)", path, file_bytes);
  }
  if (owner_uid != ::geteuid() && !creator_alive) {
    return fmt::format("{} ({} bytes, {}, but it belongs to uid {}: left for that user to clean)", path, file_bytes,
                       liveness, owner_uid);
  }
  return fmt::format("{} ({} bytes, {})", path, file_bytes, liveness);
}

bool SegmentScope::takes(std::string_view name) const {
  if (job_id.empty()) return name.substr(0, kEveryJobPrefix.size()) == kEveryJobPrefix;
  return is_job_segment_name(name, job_id);
}

Result<std::vector<SegmentRecord>> list_segments(const std::string& root_dir, const SegmentScope& scope) {
  const int dir_fd = ::open(root_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status(ErrorCode::kNotFound, fmt::format("{} does not exist", root_dir));
    if (err == ENOTDIR) return invalid_argument(fmt::format("{} is not a directory", root_dir));
    return failed_precondition(fmt::format("cannot list {}: {}", root_dir, std::strerror(err)));
  }
  DIR* dir = ::fdopendir(dir_fd);
  if (dir == nullptr) {
    ::close(dir_fd);
    return failed_precondition(fmt::format("cannot list {}: {}", root_dir, std::strerror(errno)));
  }
  std::vector<SegmentRecord> records;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (!scope.takes(name)) continue;
    records.push_back(inspect(dir_fd, root_dir, name));
  }
  ::closedir(dir);
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return records;
}

Result<std::vector<SegmentRecord>> remove_stale_segments(const std::string& root_dir, const SegmentScope& scope) {
  ENGRAM_ASSIGN_OR_RETURN(std::vector<SegmentRecord> records, list_segments(root_dir, scope));
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
