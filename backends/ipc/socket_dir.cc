#include "backends/ipc/socket_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "backends/ipc/fd_limit.h"
#include "core/base/file_type.h"

namespace engram::ipc {
namespace {

// Between a job directory's mkdir and its first socket's bind; an empty
// directory younger than this may belong to a job that is starting.
constexpr time_t kEmptyDirGraceSeconds = 10;
constexpr int kOpenAttempts = 3;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

std::string mode_text(mode_t mode) { return fmt::format("{:03o}", mode & 07777); }

const char* kWayOut =
    "set XDG_RUNTIME_DIR or ENGRAMLAB_SOCKET_DIR to a directory only you can write, or have root remove it";

// Components of an absolute path; "." and ".." are refused (a checked
// walk must not climb back out of what it checked).
Result<std::vector<std::string>> components_of(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return invalid_argument(fmt::format("socket directory '{}' is not an absolute path; give one starting with /",
                                        path));
  }
  std::vector<std::string> parts;
  size_t at = 0;
  while (at < path.size()) {
    const size_t slash = path.find('/', at);
    const std::string part = path.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    if (part == "." || part == "..") {
      return invalid_argument(fmt::format("socket directory '{}' holds '{}'; give it without . or ..", path, part));
    }
    if (!part.empty()) parts.push_back(part);
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  return parts;
}

// A directory above our own part: root's or ours, and sticky when others
// may write it (as /tmp is), so nobody else can swap what we put in it.
Status check_trusted(int fd, const std::string& shown) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return failed_precondition(fmt::format("fstat({}): {}", shown, std::strerror(errno)));
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
    return permission_denied(fmt::format("{} belongs to uid {}: every directory above the job's sockets must belong "
                                         "to root or to us (uid {}); {}",
                                         shown, st.st_uid, ::geteuid(), kWayOut));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return permission_denied(fmt::format("{} (mode {}) may be written by other users and is not sticky, so they could "
                                         "replace what we put in it; {}",
                                         shown, mode_text(st.st_mode), kWayOut));
  }
  return Status::ok();
}

// Our own part: a directory of ours that nobody else may enter.
Status check_private(int fd, const std::string& shown) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return failed_precondition(fmt::format("fstat({}): {}", shown, std::strerror(errno)));
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return permission_denied(fmt::format("{} belongs to uid {} with mode {}; it must be ours (uid {}) with mode 700 so "
                                         "no other user can reach the job's sockets; {}",
                                         shown, st.st_uid, mode_text(st.st_mode), ::geteuid(), kWayOut));
  }
  return Status::ok();
}

std::vector<std::string> entries_of(int dir_fd) {
  std::vector<std::string> names;
  const int copy = ::dup(dir_fd);
  if (copy < 0) return names;
  DIR* dir = ::fdopendir(copy);
  if (dir == nullptr) {
    ::close(copy);
    return names;
  }
  ::rewinddir(dir);  // the copy shares its position with every other copy of the fd
  while (dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

// The marker says engramlab made the directory, so the last rank out and
// `shm clean` may remove it; a directory without one (made by the user,
// e.g. ENGRAMLAB_SOCKET_DIR) is never removed, however empty.
void write_marker(int dir_fd) {
  const int fd = ::openat(dir_fd, kSocketDirMarker, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
}

bool is_our_marker(int dir_fd) {
  struct stat st{};
  return ::fstatat(dir_fd, kSocketDirMarker, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
         st.st_uid == ::geteuid();
}

// Removes the directory `dir_fd` (at `path`) when it holds nothing but our
// marker. A rank that binds its socket in between keeps the directory; the
// marker is put back for the next one out.
bool remove_if_only_marker(int dir_fd, const std::string& path) {
  if (!is_our_marker(dir_fd) || entries_of(dir_fd).size() != 1) return false;
  ::unlinkat(dir_fd, kSocketDirMarker, 0);
  if (::rmdir(path.c_str()) == 0) return true;
  write_marker(dir_fd);
  return false;
}

enum class Walk { kOpened, kParentVanished };

// Opens `name` under `parent` without following a symlink we did not vet,
// creating it (0700) when `create` allows. kParentVanished: `parent` was
// removed under us (a job ending at the same moment); walk again.
Result<Walk> open_component(int parent, const std::string& name, const std::string& shown, bool is_private, bool create,
                            Fd& out) {
  bool made = false;
  for (int tries = 0; tries < 3; ++tries) {
    struct stat st{};
    if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) {
        return failed_precondition(fmt::format("cannot look at {}: {}", shown, std::strerror(errno)));
      }
      if (!create) return Status(ErrorCode::kNotFound, fmt::format("{} does not exist", shown));
      if (::mkdirat(parent, name.c_str(), 0700) != 0) {
        if (errno == EEXIST) continue;  // another rank made it first
        if (errno == ENOENT) return Walk::kParentVanished;
        return Status(errno == EACCES || errno == EPERM ? ErrorCode::kPermissionDenied : ErrorCode::kFailedPrecondition,
                      fmt::format("cannot create the socket directory {}: {}", shown, std::strerror(errno)));
      }
      made = true;
      continue;  // look again at what we made
    }
    int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW;
    if (S_ISLNK(st.st_mode)) {
      char target[256] = {};
      const ssize_t n = ::readlinkat(parent, name.c_str(), target, sizeof(target) - 1);
      const std::string to = n > 0 ? std::string(target, static_cast<size_t>(n)) : "?";
      // A system path may be a link (/var/run -> /run) if root or we made it;
      // our own part never is.
      if (is_private || (st.st_uid != 0 && st.st_uid != ::geteuid())) {
        return permission_denied(fmt::format("{} is a symbolic link to {} made by uid {}: it could redirect the job's "
                                             "sockets to someone else's directory; {}",
                                             shown, to, st.st_uid, kWayOut));
      }
      flags &= ~O_NOFOLLOW;
    } else if (!S_ISDIR(st.st_mode)) {
      return permission_denied(fmt::format("{} is a {} of uid {}, not a directory: something else holds the name the "
                                           "job's sockets need; {}",
                                           shown, file_type_name(st.st_mode), st.st_uid, kWayOut));
    }
    Fd fd(::openat(parent, name.c_str(), flags));
    if (fd.get() < 0) {
      if (errno == ENOENT) continue;
      return open_failed(errno, shown);
    }
    // mkdir's mode went through the umask; what we made is exactly 0700.
    // (What was there already is checked as it is, never widened or narrowed.)
    struct stat opened{};
    if (made && ::fstat(fd.get(), &opened) == 0 && opened.st_uid == ::geteuid()) ::fchmod(fd.get(), 0700);
    ENGRAM_RETURN_IF_ERROR(is_private ? check_private(fd.get(), shown) : check_trusted(fd.get(), shown));
    if (made && is_private) write_marker(fd.get());
    out = std::move(fd);
    return Walk::kOpened;
  }
  return failed_precondition(fmt::format("{} keeps changing while we open it; is another process racing us?", shown));
}

// Walks `path` from "/" and returns the opened last component.
Result<Fd> open_checked(const std::string& path, int private_components, bool create,
                        std::vector<std::string>* private_paths) {
  ENGRAM_ASSIGN_OR_RETURN(const std::vector<std::string> parts, components_of(path));
  const int first_private = static_cast<int>(parts.size()) - private_components;
  for (int attempt = 0; attempt < kOpenAttempts; ++attempt) {
    Fd dir(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.get() < 0) return open_failed(errno, "/");
    ENGRAM_RETURN_IF_ERROR(check_trusted(dir.get(), "/"));
    std::string shown;
    bool vanished = false;
    if (private_paths != nullptr) private_paths->clear();
    for (int i = 0; i < static_cast<int>(parts.size()); ++i) {
      shown += "/" + parts[static_cast<size_t>(i)];
      const bool is_private = i >= first_private;
      Fd next;
      ENGRAM_ASSIGN_OR_RETURN(const Walk walk,
                              open_component(dir.get(), parts[static_cast<size_t>(i)], shown, is_private, create, next));
      if (walk == Walk::kParentVanished) {
        vanished = true;
        break;
      }
      if (is_private && private_paths != nullptr) private_paths->push_back(shown);
      dir = std::move(next);
    }
    if (!vanished) return dir;
  }
  return failed_precondition(fmt::format("the directories of {} kept vanishing while we created them", path));
}

bool run_dir_usable_by_root() {
  struct stat st{};
  struct statvfs vfs{};
  return ::geteuid() == 0 && ::lstat("/run", &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
         (st.st_mode & (S_IWGRP | S_IWOTH)) == 0 && ::statvfs("/run", &vfs) == 0 && (vfs.f_flag & ST_RDONLY) == 0;
}

// True when a process listens on the socket `name` in `dir_fd`.
bool socket_has_listener(int dir_fd, const std::string& dir_path, const std::string& name) {
  std::string path = dir_path + "/" + name;
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) path = fmt::format("/proc/self/fd/{}/{}", dir_fd, name);
  if (path.size() >= sizeof(addr.sun_path)) return true;  // cannot probe: assume in use
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (probe.get() < 0) return true;
  if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return true;
  return !(errno == ECONNREFUSED || errno == ENOENT);
}

bool is_rank_socket_name(const std::string& name) {
  constexpr std::string_view prefix = "rank-", suffix = ".sock";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  for (size_t i = prefix.size(); i < name.size() - suffix.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

SweptSocketDir sweep_job_dir(int root_fd, const std::string& root, const std::string& name) {
  SweptSocketDir out;
  out.path = root + "/" + name;
  struct stat st{};
  if (::fstatat(root_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    out.outcome = fmt::format("kept: cannot look at it ({})", std::strerror(errno));
    return out;
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    out.outcome = fmt::format("kept: a {} of uid {}, not a job directory of ours", file_type_name(st.st_mode), st.st_uid);
    return out;
  }
  Fd job(::openat(root_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (job.get() < 0) {
    out.outcome = fmt::format("kept: cannot open it ({})", std::strerror(errno));
    return out;
  }
  std::vector<std::string> sockets;
  for (const std::string& entry : entries_of(job.get())) {
    if (entry == kSocketDirMarker && is_our_marker(job.get())) continue;
    struct stat es{};
    if (::fstatat(job.get(), entry.c_str(), &es, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISSOCK(es.st_mode) || es.st_uid != ::geteuid() || !is_rank_socket_name(entry)) {
      out.outcome = fmt::format("kept: it holds {} (a {}), which engramlab does not make; remove it by hand", entry,
                                file_type_name(es.st_mode));
      return out;
    }
    if (socket_has_listener(job.get(), out.path, entry)) {
      out.outcome = fmt::format("kept: in use ({} has a listener)", entry);
      return out;
    }
    sockets.push_back(entry);
  }
  const bool marked = is_our_marker(job.get());
  if (sockets.empty() && !marked) {
    out.outcome = fmt::format("kept: no rank sockets and no {} marker, so engramlab did not make it", kSocketDirMarker);
    return out;
  }
  if (sockets.empty() && ::time(nullptr) - st.st_mtime < kEmptyDirGraceSeconds) {
    out.outcome = "kept: empty and new (a job may be starting)";
    return out;
  }
  for (const std::string& s : sockets) ::unlinkat(job.get(), s.c_str(), 0);
  if (marked) ::unlinkat(job.get(), kSocketDirMarker, 0);
  if (::unlinkat(root_fd, name.c_str(), AT_REMOVEDIR) != 0) {
    const int err = errno;
    if (marked) write_marker(job.get());
    out.outcome = fmt::format("kept: removing it failed ({})", std::strerror(err));
    return out;
  }
  out.removed = true;
  out.outcome = fmt::format("removed: {} dead socket(s), nobody listening", sockets.size());
  return out;
}

}  // namespace

void remove_dead_rank_sockets(const std::string& job_dir) {
  Fd dir(::open(job_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() < 0) return;
  for (const std::string& entry : entries_of(dir.get())) {
    struct stat st{};
    if (!is_rank_socket_name(entry) || ::fstatat(dir.get(), entry.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) {
      continue;
    }
    if (!socket_has_listener(dir.get(), job_dir, entry)) ::unlinkat(dir.get(), entry.c_str(), 0);
  }
}

void remove_ended_job_dir(const std::string& job_dir) {
  remove_dead_rank_sockets(job_dir);
  Fd dir(::open(job_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() >= 0) remove_if_only_marker(dir.get(), job_dir);
}

std::string default_socket_root() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/engramlab";
  if (run_dir_usable_by_root()) return "/run/engramlab";
  return "/tmp/engramlab-" + std::to_string(::geteuid());
}

std::string default_socket_dir(const std::string& job_id) { return default_socket_root() + "/" + job_id; }

Result<std::unique_ptr<SocketDir>> SocketDir::open(const std::string& path, int private_components,
                                                   bool remove_when_empty) {
  ENGRAM_CHECK(private_components >= 1);
  std::unique_ptr<SocketDir> dir(new SocketDir());
  ENGRAM_ASSIGN_OR_RETURN(Fd opened, open_checked(path, private_components, /*create=*/true, &dir->private_paths_));
  dir->path_ = dir->private_paths_.empty() ? path : dir->private_paths_.back();
  if (!remove_when_empty) dir->private_paths_.clear();  // nothing of it is ours to remove
  // On a termination signal: each directory we made goes with its marker
  // when nothing else is in it, and keeps its marker when another job's
  // directory is (signal_teardown.h, kMarkedDirectory).
  for (const std::string& made : dir->private_paths_)
    dir->teardown_.emplace_back(made + "/" + kSocketDirMarker, TeardownKind::kMarkedDirectory);
  return dir;
}

Result<std::unique_ptr<SocketDir>> SocketDir::open_default(const std::string& job_id) {
  return open(default_socket_dir(job_id), 2);
}

SocketDir::~SocketDir() {
  // Deepest first; a directory another rank still uses is not empty and
  // stays, and one engramlab did not make (no marker) stays too.
  for (auto it = private_paths_.rbegin(); it != private_paths_.rend(); ++it) {
    Fd dir(::open(it->c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir.get() < 0 || !remove_if_only_marker(dir.get(), *it)) break;
  }
}

Result<std::vector<SweptSocketDir>> sweep_stale_socket_dirs(const std::string& root, const std::string& only_job) {
  auto opened = open_checked(root, 1, /*create=*/false, nullptr);
  if (!opened.is_ok()) {
    if (opened.status().code() == ErrorCode::kNotFound) return std::vector<SweptSocketDir>{};
    return std::move(opened).take_status();
  }
  const Fd root_fd = std::move(opened).value();
  std::vector<SweptSocketDir> swept;
  for (const std::string& name : entries_of(root_fd.get())) {
    if (name == kSocketDirMarker) continue;
    if (only_job.empty() || name == only_job) swept.push_back(sweep_job_dir(root_fd.get(), root, name));
  }
  if (remove_if_only_marker(root_fd.get(), root)) swept.push_back({root, "removed: the empty socket root", true});
  return swept;
}

}  // namespace engram::ipc
