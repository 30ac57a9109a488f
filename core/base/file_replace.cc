#include "core/base/file_replace.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <random>

#include "core/base/closing_fd.h"
#include "core/base/file_type.h"
#include "core/base/text_excerpt.h"

namespace engram {
namespace {

// Enough tries that only a directory filled on purpose runs out of them.
constexpr int kMaxNameAttempts = 64;
// "." + prefix + "." + 16 hex digits + ".tmp": the room left for the prefix.
constexpr size_t kTempOverheadBytes = 1 + 1 + 16 + 4;

// A hidden name beside the target that fits NAME_MAX whatever the target's
// length: the target's name is cut to the room left.
std::string temporary_name(const std::string& name) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format(".{}.{:016x}.tmp", name.substr(0, NAME_MAX - kTempOverheadBytes), rng());
}

Status write_all(int fd, std::string_view text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed_precondition(std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

bool is_null_device(const struct stat& st) { return S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3); }

// The directory and the last component of `path`.
struct Split {
  std::string dir, name;
};

Split split_path(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// What is at `name` in `dir_fd`; Status ok with `exists` false when nothing.
// `mode_out` gets the permission bits to keep when replacing.
Status check_target(int dir_fd, const std::string& name, const std::string& shown, std::string_view what,
                    bool& exists, bool& discard, mode_t& mode_out) {
  exists = false;
  discard = false;
  struct stat st{};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status::ok();
    return failed_precondition(
        fmt::format("cannot write {} to '{}': {}; give a path you may write", what, shown, std::strerror(errno)));
  }
  exists = true;
  if (is_null_device(st)) {
    discard = true;
    return Status::ok();
  }
  if (S_ISLNK(st.st_mode)) {
    char target[PATH_MAX + 1] = {};
    const ssize_t n = ::readlinkat(dir_fd, name.c_str(), target, PATH_MAX);
    const std::string to = n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string("?");
    return failed_precondition(fmt::format(
        "refusing to write {} to '{}': it is a symbolic link (to '{}', owned by uid {}); an output is never written "
        "through or over a link, which another user could have planted; remove it or give the file's own path",
        what, shown, excerpt(to, 200), st.st_uid));
  }
  if (!S_ISREG(st.st_mode)) {
    return failed_precondition(fmt::format(
        "refusing to write {} to '{}': it is a {}, not a regular file; give the path of a new or a regular file", what,
        shown, file_type_name(st.st_mode)));
  }
  if (st.st_uid != ::geteuid()) {
    return failed_precondition(fmt::format(
        "refusing to write {} over '{}': that file is owned by uid {}, not by you (uid {}); another user's file is "
        "never replaced: give another path",
        what, shown, st.st_uid, ::geteuid()));
  }
  mode_out = st.st_mode & 0777;
  return Status::ok();
}

// Opens the directory of `path` and refuses the kernel's pseudo file systems.
Status open_directory(const std::string& path, std::string_view what, Split& split, ClosingFd& dir) {
  const std::string shown = excerpt(path, 200);
  split = split_path(path);
  if (split.name.empty() || split.name == "." || split.name == "..") {
    return failed_precondition(
        fmt::format("cannot write {} to '{}': it names a directory; give a file name", what, shown));
  }
  dir.fd = ::open(split.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir.fd < 0) {
    return failed_precondition(fmt::format("cannot write {} to '{}': its directory '{}': {}; give a directory you "
                                           "may write",
                                           what, shown, excerpt(split.dir, 200), std::strerror(errno)));
  }
  struct statfs fs{};
  if (::fstatfs(dir.fd, &fs) == 0 && (fs.f_type == PROC_SUPER_MAGIC || fs.f_type == SYSFS_MAGIC)) {
    return failed_precondition(fmt::format(
        "refusing to write {} to '{}': it is in {}, the kernel's own files, not a place for output; give a path in "
        "an ordinary directory",
        what, shown, fs.f_type == PROC_SUPER_MAGIC ? "/proc" : "/sys"));
  }
  return Status::ok();
}

}  // namespace

Status check_output_path(const std::string& path, std::string_view what) {
  Split split;
  ClosingFd dir;
  ENGRAM_RETURN_IF_ERROR(open_directory(path, what, split, dir));
  bool exists = false, discard = false;
  mode_t mode = 0;
  return check_target(dir.fd, split.name, excerpt(path, 200), what, exists, discard, mode);
}

Status write_output_file(const std::string& path, std::string_view text, std::string_view what) {
  const std::string shown = excerpt(path, 200);
  Split split;
  ClosingFd dir;
  ENGRAM_RETURN_IF_ERROR(open_directory(path, what, split, dir));
  bool exists = false, discard = false;
  mode_t kept_mode = 0;
  ENGRAM_RETURN_IF_ERROR(check_target(dir.fd, split.name, shown, what, exists, discard, kept_mode));
  if (discard) return Status::ok();

  std::string tmp;
  ClosingFd file;
  for (int attempt = 0; attempt < kMaxNameAttempts && file.fd < 0; ++attempt) {
    tmp = temporary_name(split.name);
    // 0666 less the umask, as a plain create would give; a replaced file's
    // own bits instead (set below, after the umask).
    file.fd = ::openat(dir.fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       exists ? 0600 : 0666);
    if (file.fd < 0 && errno != EEXIST) break;
  }
  if (file.fd < 0) {
    return failed_precondition(fmt::format("cannot create {} next to '{}': {}; give a directory you may write", what,
                                           shown, std::strerror(errno)));
  }
  Status written = write_all(file.fd, text);
  if (written.is_ok() && exists && ::fchmod(file.fd, kept_mode) != 0) written = failed_precondition(std::strerror(errno));
  if (written.is_ok() && ::fsync(file.fd) != 0) written = failed_precondition(std::strerror(errno));
  if (::close(file.fd) != 0 && written.is_ok()) written = failed_precondition(std::strerror(errno));
  file.fd = -1;
  if (written.is_ok()) {
    // Checked again just before the rename: what was planted meanwhile is
    // refused too (the rename itself never writes through a link).
    mode_t mode_now = 0;
    written = check_target(dir.fd, split.name, shown, what, exists, discard, mode_now);
    if (written.is_ok() && discard) {
      ::unlinkat(dir.fd, tmp.c_str(), 0);
      return Status::ok();
    }
    if (!written.is_ok()) {
      ::unlinkat(dir.fd, tmp.c_str(), 0);
      return written;
    }
    if (::renameat(dir.fd, tmp.c_str(), dir.fd, split.name.c_str()) == 0) return Status::ok();
    written = failed_precondition(std::strerror(errno));
    ::unlinkat(dir.fd, tmp.c_str(), 0);
    return failed_precondition(fmt::format("cannot rename {} into place at '{}': {}; give a path you may replace",
                                           what, shown, written.message()));
  }
  ::unlinkat(dir.fd, tmp.c_str(), 0);
  return failed_precondition(fmt::format("cannot write {} to '{}': {}; check the space and permissions there", what,
                                         shown, written.message()));
}

}  // namespace engram
