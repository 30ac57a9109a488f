#include "backends/memfd/proc_fd_shared_memory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "backends/shm/memory_cgroup.h"
#include "core/base/units.h"
#include "core/backend/shm_fill_limits.h"

namespace engram::memfd {
namespace {

// One map of a memfd; the creator's keeps the fd open (the /proc path
// resolves only while it is), a reader's fd was closed once mapped.
class MemfdMapping final : public ProcessSharedMapping {
 public:
  MemfdMapping(std::string name, void* address, uint64_t bytes, bool writable, int fd)
      : name_(std::move(name)), address_(address), bytes_(bytes), writable_(writable), fd_(fd) {}
  ~MemfdMapping() override {
    ::munmap(address_, mapped_bytes(bytes_));
    if (fd_ >= 0) ::close(fd_);
  }
  std::span<std::byte> bytes() override {
    if (!writable_) return {};
    return {static_cast<std::byte*>(address_), bytes_};
  }
  std::span<const std::byte> data() const override { return {static_cast<const std::byte*>(address_), bytes_}; }
  const std::string& name() const override { return name_; }
  ProcessFdRef owner() const override { return {static_cast<int64_t>(::getpid()), fd_}; }

  // mmap needs at least a byte (an empty table still maps one, as SGLang does).
  static uint64_t mapped_bytes(uint64_t bytes) { return bytes == 0 ? 1 : bytes; }

 private:
  std::string name_;
  void* address_;
  uint64_t bytes_;
  bool writable_;
  int fd_;
};

std::string errno_text(int err) { return std::strerror(err); }

// Reserves every page of a table the caller is about to fill, as the POSIX
// segments do (backends/shm/posix_shared_memory.cc): past its memory
// cgroup's headroom the refusal names the limit before any page is written
// (a fill past it is OOM-killed midway), and fallocate makes a page the
// kernel cannot give an error here instead of a SIGBUS on first touch in
// the middle of the fill.
Status reserve_pages(int fd, const std::string& what, uint64_t bytes, const std::string& fix) {
  ENGRAM_ASSIGN_OR_RETURN(const std::optional<shm::MemoryCgroup> cgroup, shm::this_process_memory_cgroup());
  if (cgroup && bytes > cgroup->headroom_bytes())
    return memory_cgroup_refusal(what, bytes, cgroup->path, cgroup->limit_bytes, cgroup->usage_bytes);
  // fallocate(2), not posix_fallocate: where the file system cannot reserve
  // (EOPNOTSUPP), glibc's fallback would write every byte; there the fill
  // goes on unreserved, as before.
  if (::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0) return Status::ok();
  const int err = errno;
  if (err == EOPNOTSUPP) return Status::ok();
  return Status(err == ENOSPC || err == ENOMEM ? ErrorCode::kResourceExhausted : ErrorCode::kFailedPrecondition,
                fmt::format("reserving the {} bytes ({}) of {} failed: {}; {}", bytes, format_bytes(bytes), what,
                            errno_text(err), fix),
                {.step = "shm_write"});
}

// The fix for a table file its directory cannot hold: the room there now
// (statvfs) against the table, and the layouts that need no file.
std::string file_system_fix(const std::string& dir, uint64_t bytes) {
  struct statvfs fs{};
  const std::string room =
      ::statvfs(dir.c_str(), &fs) == 0
          ? fmt::format("{} has {} free", dir, format_bytes(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize))
          : dir + "'s free space is unknown";
  return fmt::format("{} for a {} table file: free room there, or use a layout that keeps the table in memory "
                     "(--placement sglang_shared, or SGLang's host layout `shared`)",
                     room, format_bytes(bytes));
}

}  // namespace

Result<std::string> ProcFdSharedMemory::pid_namespace() {
  std::array<char, 128> link{};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link.data(), link.size() - 1);
  if (n < 0) return failed_precondition("readlink(/proc/self/ns/pid) failed: " + errno_text(errno));
  return std::string(link.data(), static_cast<size_t>(n));
}

Result<std::unique_ptr<ProcessSharedMapping>> ProcFdSharedMemory::create(const std::string& name, uint64_t bytes) {
  const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return failed_precondition(fmt::format("memfd_create({}) failed: {}", name, errno_text(errno)));
  const uint64_t mapped = MemfdMapping::mapped_bytes(bytes);
  if (::ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    const int err = errno;
    ::close(fd);
    return Status(err == ENOSPC || err == ENOMEM ? ErrorCode::kResourceExhausted : ErrorCode::kFailedPrecondition,
                  fmt::format("ftruncate of memfd {} to {} bytes failed: {}", name, mapped, errno_text(err)));
  }
  if (Status reserved = reserve_pages(fd, "memfd " + name, mapped,
                                      "free host memory (or raise the container's memory limit) and start again");
      !reserved.is_ok()) {
    ::close(fd);
    return reserved;
  }
  void* address = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return resource_exhausted(fmt::format("mmap of memfd {} ({} bytes) failed: {}", name, mapped, errno_text(err)));
  }
  return std::unique_ptr<ProcessSharedMapping>(std::make_unique<MemfdMapping>(name, address, bytes, true, fd));
}

Result<std::unique_ptr<ShmMapping>> ProcFdSharedMemory::open_read_only(ProcessFdRef owner, uint64_t bytes) {
  const std::string path = fmt::format("/proc/{}/fd/{}", owner.pid, owner.fd);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kFailedPrecondition,
                  fmt::format("open({}) failed: {}", path, errno_text(err)));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < MemfdMapping::mapped_bytes(bytes)) {
    const int err = errno;
    ::close(fd);
    return failed_precondition(fmt::format("{} holds {} bytes, {} expected{}", path, static_cast<int64_t>(st.st_size),
                                           bytes, err != 0 ? ": " + errno_text(err) : std::string()));
  }
  void* address = ::mmap(nullptr, MemfdMapping::mapped_bytes(bytes), PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the map keeps the memfd alive
  if (address == MAP_FAILED) return resource_exhausted(fmt::format("mmap of {} failed: {}", path, errno_text(err)));
  return std::unique_ptr<ShmMapping>(std::make_unique<MemfdMapping>(path, address, bytes, false, -1));
}

Result<std::string> ProcFdSharedMemory::path_of(const std::string& name) const {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return invalid_argument("table file name '" + name + "' is not a plain file name");
  return table_file_dir_ + "/" + name;
}

Result<std::unique_ptr<ShmMapping>> ProcFdSharedMemory::create_file(const std::string& name, uint64_t bytes) {
  ENGRAM_ASSIGN_OR_RETURN(const std::string path, path_of(name));
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    const int err = errno;
    // In a shared /tmp the name may be another user's (not ours to remove).
    struct stat st{};
    if (err == EEXIST && ::lstat(path.c_str(), &st) == 0 && st.st_uid != ::geteuid())
      return Status(ErrorCode::kAlreadyExists,
                    fmt::format("creating table file {} failed: it already exists and is owned by uid {}, another "
                                "user (you are uid {}): it is not a file of yours, and you cannot remove it; run with "
                                "a fresh ENGRAMLAB_JOB_TOKEN (the name carries a part derived from it) or another "
                                "--job-id, and ask that user or an administrator about it",
                                path, st.st_uid, ::geteuid()));
    return Status(err == EEXIST ? ErrorCode::kAlreadyExists : ErrorCode::kFailedPrecondition,
                  fmt::format("creating table file {} failed: {}", path, errno_text(err)));
  }
  const uint64_t mapped = MemfdMapping::mapped_bytes(bytes);
  void* address = MAP_FAILED;
  int err = 0;
  Status reserved = Status::ok();
  if (::ftruncate(fd, static_cast<off_t>(mapped)) != 0) err = errno;
  else if (reserved = reserve_pages(fd, "table file " + path, mapped, file_system_fix(table_file_dir_, mapped));
           !reserved.is_ok())
    err = -1;
  else if ((address = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) err = errno;
  ::close(fd);  // the map keeps the file
  if (!reserved.is_ok()) {
    ::unlink(path.c_str());
    return reserved;
  }
  if (address == MAP_FAILED) {
    ::unlink(path.c_str());
    return Status(err == ENOSPC || err == ENOMEM ? ErrorCode::kResourceExhausted : ErrorCode::kFailedPrecondition,
                  fmt::format("sizing and mapping table file {} ({} bytes) failed: {}", path, mapped, errno_text(err)));
  }
  return std::unique_ptr<ShmMapping>(std::make_unique<MemfdMapping>(path, address, bytes, true, -1));
}

Result<std::unique_ptr<ShmMapping>> ProcFdSharedMemory::open_file_read_only(const std::string& name, uint64_t bytes) {
  ENGRAM_ASSIGN_OR_RETURN(const std::string path, path_of(name));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kFailedPrecondition,
                  fmt::format("open({}) failed: {}", path, errno_text(err)));
  }
  struct stat st{};
  const bool sized = ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= MemfdMapping::mapped_bytes(bytes);
  void* address = sized ? ::mmap(nullptr, MemfdMapping::mapped_bytes(bytes), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int err = errno;
  ::close(fd);
  if (!sized) return failed_precondition(fmt::format("{} holds {} bytes, {} expected", path, static_cast<int64_t>(st.st_size), bytes));
  if (address == MAP_FAILED) return resource_exhausted(fmt::format("mmap of {} failed: {}", path, errno_text(err)));
  // Rows are read one at a time, scattered: no read-ahead (SGLang's MADV_RANDOM).
  ::madvise(address, MemfdMapping::mapped_bytes(bytes), MADV_RANDOM);
  return std::unique_ptr<ShmMapping>(std::make_unique<MemfdMapping>(path, address, bytes, false, -1));
}

Status ProcFdSharedMemory::remove_file(const std::string& name) {
  ENGRAM_ASSIGN_OR_RETURN(const std::string path, path_of(name));
  if (::unlink(path.c_str()) == 0) return Status::ok();
  const int err = errno;
  return Status(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kFailedPrecondition,
                fmt::format("unlink({}) failed: {}", path, errno_text(err)));
}

}  // namespace engram::memfd
