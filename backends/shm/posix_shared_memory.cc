#include "backends/shm/posix_shared_memory.h"

#include "backends/shm/memory_cgroup.h"
#include "core/backend/shm_fill_limits.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <sys/stat.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <cerrno>
#include <cstring>
#include <utility>

#include "backends/shm/segment_header.h"
#include "backends/shm/segment_liveness.h"
#include "core/base/units.h"

namespace engram::shm {
namespace bip = boost::interprocess;

namespace {

// Lets Boost.Interprocess map an fd we opened ourselves (exclusive create in
// any directory, which shared_memory_object cannot do outside /dev/shm).
struct FdMappable {
  int fd;
  bip::mapping_handle_t get_mapping_handle() const { return bip::ipcdetail::mapping_handle_from_file_handle(fd); }
};

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { if (fd_ >= 0) ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int release() { return std::exchange(fd_, -1); }
 private:
  int fd_;
};

// Keeps the segment's fd, and with it the OFD lock that tells `shm clean` the
// segment is in use (segment_liveness.h), open for as long as it is mapped.
class RegionMapping final : public ShmMapping {
 public:
  RegionMapping(std::string name, int locked_fd, bip::mapped_region region, uint64_t data_bytes, bool writable)
      : name_(std::move(name)), locked_fd_(locked_fd), region_(std::move(region)), data_bytes_(data_bytes),
        writable_(writable) {
    ENGRAM_CHECK(region_.get_size() == kSegmentHeaderBytes + data_bytes_);
  }
  std::span<std::byte> bytes() override {
    if (!writable_) return {};
    return {static_cast<std::byte*>(region_.get_address()) + kSegmentHeaderBytes, data_bytes_};
  }
  std::span<const std::byte> data() const override {
    return {static_cast<const std::byte*>(region_.get_address()) + kSegmentHeaderBytes, data_bytes_};
  }
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  FdCloser locked_fd_;         // closed after the region below unmaps
  bip::mapped_region region_;  // unmaps on destruction
  uint64_t data_bytes_;
  bool writable_;
};

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

std::string segment_name(const std::string& job_id, std::string_view name_part, const std::string& table) {
  return shm_segment_prefix(job_id, name_part) + table;
}

PosixSharedMemory::PosixSharedMemory(PosixSharedMemoryOptions options) : options_(std::move(options)) {
  ENGRAM_CHECK(!options_.root_dir.empty());
}

std::string PosixSharedMemory::path_of(const std::string& name) const { return options_.root_dir + "/" + name; }

Status PosixSharedMemory::check_name(const std::string& name) const {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.size() > NAME_MAX) {
    return invalid_argument("shm segment name '" + name +
                            "' is not a plain file name (no '/', 1.." + std::to_string(NAME_MAX) +
                            " characters); use segment_name(job_id, name_part, table)");
  }
  return Status::ok();
}

Result<ShmInfo> PosixSharedMemory::info() {
  ShmInfo info;
  struct stat st{};
  if (::stat(options_.root_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return info;  // mounted = false
  // Only a tmpfs holds segments in memory: on a plain directory or a disk
  // bind mount statvfs would report the disk, and the tables would be files.
  struct statfs fs{};
  if (::statfs(options_.root_dir.c_str(), &fs) != 0) {
    return failed_precondition("statfs(" + options_.root_dir + ") failed: " + errno_text(errno));
  }
  if (fs.f_type != TMPFS_MAGIC) {
    info.not_tmpfs = fmt::format("{} is a directory on a filesystem of type 0x{:x}, not a tmpfs (a plain directory or "
                                 "a disk mount: segments there would be disk files)",
                                 options_.root_dir, static_cast<uint64_t>(fs.f_type));
    return info;  // mounted = false
  }
  struct statvfs vfs{};
  if (::statvfs(options_.root_dir.c_str(), &vfs) != 0) {
    return failed_precondition("statvfs(" + options_.root_dir + ") failed: " + errno_text(errno));
  }
  info.mounted = true;
  info.tmpfs_bytes_total = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  info.tmpfs_bytes_free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  return info;
}

Status PosixSharedMemory::describe_existing(const std::string& name) const {
  const std::string path = path_of(name);
  std::string creator = "with no engramlab creator record";
  SegmentUse use = SegmentUse::kUnused;  // a file without our header is nobody's segment
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return Status(ErrorCode::kAlreadyExists,
                  "shm segment '" + name + "' cannot be created: " + path +
                      " exists and is not a regular file (a FIFO, device, link or directory put there by someone "
                      "else?); remove it or pick a different --job-id",
                  {.step = "shm create"});
  }
  // Another user's file under this job's name: not ours, so not a stale
  // segment of ours, and neither `shm clean` nor rm (in a sticky /dev/shm)
  // can remove it for us. The name's part comes from the job token, so that
  // user saw an earlier run's names under the same token and job id (or has
  // the token).
  if (::lstat(path.c_str(), &st) == 0 && st.st_uid != ::geteuid()) {
    return Status(ErrorCode::kAlreadyExists,
                  fmt::format("shm segment '{}' cannot be created: {} already exists and is owned by uid {}, another "
                              "user (you are uid {}): it is not a segment of yours, and you cannot remove it; run "
                              "with a fresh ENGRAMLAB_JOB_TOKEN (the name carries a part derived from it) or another "
                              "--job-id (or point ENGRAMLAB_SHM_DIR at a directory only you can write), and ask that "
                              "user or an administrator about it",
                              name, path, st.st_uid, ::geteuid()),
                  {.step = "shm create"});
  }
  // Non-blocking: the name may have become a FIFO since the lstat.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd >= 0) {
    FdCloser closer(fd);
    SegmentHeader header{};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        ::pread(fd, &header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header)) && header_is_valid(header)) {
      const SegmentVerdict verdict = judge_segment(fd, header);
      use = verdict.use;
      creator = verdict.reason;
    }
  }
  std::string message = "shm segment '" + name + "' already exists at " + path + " (" + creator + "): ";
  if (use == SegmentUse::kUnused) {
    message += "a stale segment left by a crashed run whose creator is no longer running; it is not reused. Remove it with `engramlab shm clean --dir " +
               options_.root_dir + "` (only segments nobody holds) or `rm " + path + "`";
  } else if (use == SegmentUse::kInUse) {
    message += "a process of this job id still running uses it; pick a different --job-id or stop that process";
  } else {
    message += "pick a different --job-id, or `rm " + path + "` once no job with this id runs";
  }
  return Status(ErrorCode::kAlreadyExists, message, {.step = "shm create"});
}

Result<std::unique_ptr<ShmMapping>> PosixSharedMemory::create(const std::string& name, uint64_t bytes) {
  ENGRAM_RETURN_IF_ERROR(check_name(name));
  if (bytes == 0) return invalid_argument("shm segment '" + name + "': size 0 bytes; a table has at least one row");
  ENGRAM_ASSIGN_OR_RETURN(ShmInfo shm_info, info());
  if (!shm_info.mounted && !shm_info.not_tmpfs.empty()) {
    return failed_precondition("no tmpfs to hold segment '" + name + "': " + shm_info.not_tmpfs +
                               "; mount one there (mount -t tmpfs -o size=... tmpfs " + options_.root_dir +
                               ") or point ENGRAMLAB_SHM_DIR at one");
  }
  if (!shm_info.mounted) {
    return failed_precondition("shm directory " + options_.root_dir +
                               " does not exist: no tmpfs to hold segment '" + name +
                               "' (containers: run with --ipc=host or mount a tmpfs there)");
  }
  const uint64_t file_bytes = kSegmentHeaderBytes + bytes;
  const std::string sizes = "segment '" + name + "' needs " + format_gib(bytes) + " (" + std::to_string(bytes) +
                            " bytes) + a 4 KiB header; the tmpfs at " + options_.root_dir + " holds " +
                            format_gib(shm_info.tmpfs_bytes_total) + " (" +
                            std::to_string(shm_info.tmpfs_bytes_total) + " bytes) in total, " +
                            format_gib(shm_info.tmpfs_bytes_free) + " free";
  if (file_bytes > shm_info.tmpfs_bytes_total) {
    return Status(ErrorCode::kResourceExhausted,
                  sizes + ": it can never fit; enlarge it (docker --shm-size, mount -o remount,size=...)",
                  {.step = "shm create"});
  }

  const std::string path = path_of(name);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST) return describe_existing(name);
    if (err == EACCES || err == EPERM) {
      return Status(ErrorCode::kPermissionDenied, "cannot create " + path + ": " + errno_text(err), {.step = "shm create"});
    }
    if (err == ENOSPC || err == EMFILE || err == ENFILE) {
      return Status(ErrorCode::kResourceExhausted, "cannot create " + path + ": " + errno_text(err), {.step = "shm create"});
    }
    return Status(ErrorCode::kUnavailable, "cannot create " + path + ": " + errno_text(err), {.step = "shm create"});
  }
  FdCloser closer(fd);
  owned_.insert_or_assign(name, ipc::TeardownPath(path, ipc::TeardownKind::kFile));
  // From here every failure removes what we created.
  auto fail = [&](ErrorCode code, std::string message) -> Status {
    ::unlink(path.c_str());
    owned_.erase(name);
    return Status(code, std::move(message), {.step = "shm create"});
  };
  // The umask must not widen or narrow what readers of this user can open.
  if (::fchmod(fd, 0600) != 0) return fail(ErrorCode::kInternal, "fchmod(" + path + ", 0600): " + errno_text(errno));

  // The lock before the header: a segment with a header is in use until this
  // fd closes (by exit too), so `shm clean` never takes one being made.
  const bool locked = hold_segment_lock(fd);
  // The creator record goes in first, so a crash from here on leaves a
  // segment that names its (dead) creator.
  const SegmentHeader header = make_header_for_this_process(bytes, locked);
  if (::ftruncate(fd, static_cast<off_t>(kSegmentHeaderBytes)) != 0 ||
      ::pwrite(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    const int err = errno;
    return fail(err == ENOSPC ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
                "writing the header of " + path + ": " + errno_text(err) + "; " + sizes);
  }
  if (::ftruncate(fd, static_cast<off_t>(file_bytes)) != 0) {
    return fail(ErrorCode::kResourceExhausted, "ftruncate(" + path + "): " + errno_text(errno) + "; " + sizes);
  }
  // The pages about to be reserved are charged to this process's memory
  // cgroup: past its limit the kernel OOM-kills the writer mid-fill (and the
  // half-made segment stays behind), so refuse first, naming the limit.
  auto cgroup_or = this_process_memory_cgroup();
  if (!cgroup_or.is_ok()) return fail(cgroup_or.status().code(), cgroup_or.status().message());
  const std::optional<MemoryCgroup> cgroup = std::move(cgroup_or).value();
  if (cgroup && file_bytes > cgroup->headroom_bytes()) {
    const Status refusal =
        memory_cgroup_refusal("/dev/shm/" + name, bytes, cgroup->path, cgroup->limit_bytes, cgroup->usage_bytes);
    return fail(refusal.code(), refusal.message());
  }
  // Reserve every page now: a tmpfs that is too small answers ENOSPC here,
  // instead of SIGBUS on first touch in the middle of a load.
  const int fallocate_err = ::posix_fallocate(fd, 0, static_cast<off_t>(file_bytes));
  if (fallocate_err != 0) {
    return fail(fallocate_err == ENOSPC ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
                "reserving the pages of " + path + " failed (" + errno_text(fallocate_err) + "): " + sizes);
  }
  try {
    bip::mapped_region region(FdMappable{fd}, bip::read_write, 0, static_cast<size_t>(file_bytes));
    return std::unique_ptr<ShmMapping>(
        new RegionMapping(name, closer.release(), std::move(region), bytes, /*writable=*/true));
  } catch (const bip::interprocess_exception& e) {
    return fail(ErrorCode::kResourceExhausted, "mapping " + path + " read-write failed: " + e.what() + "; " + sizes);
  }
}

Result<std::unique_ptr<ShmMapping>> PosixSharedMemory::open_read_only(const std::string& name, uint64_t bytes) {
  ENGRAM_RETURN_IF_ERROR(check_name(name));
  const std::string path = path_of(name);
  // Non-blocking, so a FIFO under the segment's name cannot hang the reader.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return Status(ErrorCode::kNotFound,
                    "shm segment " + path + " does not exist: its writer has not created it yet, or this rank is on "
                    "another host or in another IPC/mount namespace (containers: --ipc=host)",
                    {.step = "shm map"});
    }
    return Status(err == EACCES ? ErrorCode::kPermissionDenied : ErrorCode::kUnavailable,
                  "cannot open " + path + " read-only: " + errno_text(err), {.step = "shm map"});
  }
  FdCloser closer(fd);
  struct stat st{};
  if (::fstat(fd, &st) != 0) return internal_error("fstat(" + path + "): " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) {
    return Status(ErrorCode::kFailedPrecondition,
                  "shm segment " + path + " is not a regular file (a FIFO or device put there by someone else?); "
                  "remove it and run the job again",
                  {.step = "shm map"});
  }
  const uint64_t expected_bytes = kSegmentHeaderBytes + bytes;
  if (static_cast<uint64_t>(st.st_size) != expected_bytes) {
    return Status(ErrorCode::kFailedPrecondition,
                  "shm segment " + path + " holds " + std::to_string(st.st_size) + " bytes, expected " +
                      std::to_string(expected_bytes) + " (" + std::to_string(bytes) +
                      " table bytes + 4 KiB header): the writer made a different table",
                  {.step = "shm map"});
  }
  try {
    bip::mapped_region region(FdMappable{fd}, bip::read_only, 0, static_cast<size_t>(expected_bytes));
    SegmentHeader header{};
    std::memcpy(&header, region.get_address(), sizeof(header));
    if (!header_is_valid(header) || header.data_bytes != bytes) {
      return Status(ErrorCode::kFailedPrecondition,
                    "shm segment " + path + " has no valid engramlab header for a " + std::to_string(bytes) +
                        "-byte table; it was not made by engramlab's create()",
                    {.step = "shm map"});
    }
    // A reader holds the lock too: the segment stays in use while anyone maps
    // it. Where the filesystem has no OFD locks the writer's header says so,
    // and nobody judges the segment dead.
    (void)hold_segment_lock(fd);
    return std::unique_ptr<ShmMapping>(
        new RegionMapping(name, closer.release(), std::move(region), bytes, /*writable=*/false));
  } catch (const bip::interprocess_exception& e) {
    return Status(ErrorCode::kUnavailable, "mapping " + path + " read-only failed: " + e.what(), {.step = "shm map"});
  }
}

Status PosixSharedMemory::unlink(const std::string& name) {
  ENGRAM_RETURN_IF_ERROR(check_name(name));
  const std::string path = path_of(name);
  const int unlinked = ::unlink(path.c_str());
  owned_.erase(name);  // gone, or not ours to remove at a signal any more
  if (unlinked != 0) {
    const int err = errno;
    return Status(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kPermissionDenied,
                  "unlink(" + path + "): " + errno_text(err), {.step = "shm unlink"});
  }
  return Status::ok();
}

}  // namespace engram::shm
