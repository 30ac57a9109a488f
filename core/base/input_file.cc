#include "core/base/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>

#include "core/base/closing_fd.h"
#include "core/base/file_type.h"
#include "core/base/text_excerpt.h"

namespace engram {
namespace {

constexpr int kMaxLinks = 8;

std::mutex& observer_mutex() {
  static std::mutex m;
  return m;
}
std::function<void(const std::string&)>& observer() {
  static std::function<void(const std::string&)> o;
  return o;
}

// The path the link at `path` leads to, relative to the link's directory.
std::string link_target(const std::string& path, const std::string& target) {
  if (target.starts_with('/')) return target;
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? target : path.substr(0, slash + 1) + target;
}

}  // namespace

void set_input_read_observer(std::function<void(const std::string& path)> o) {
  std::lock_guard lock(observer_mutex());
  observer() = std::move(o);
}

Result<std::string> read_input_file(const std::string& path, std::string_view what, size_t max_bytes,
                                    std::string_view bound_name) {
  const std::string shown = excerpt(path, 200);
  auto cannot = [&](int err) {
    return invalid_argument(fmt::format("{}: cannot read '{}': {}; check the path", what, shown, std::strerror(err)));
  };
  std::string at = path;
  struct stat named{};
  for (int links = 0;; ++links) {
    ClosingFd probe{::open(at.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC)};
    if (probe.fd < 0 || ::fstat(probe.fd, &named) != 0) return cannot(errno);
    if (!S_ISLNK(named.st_mode)) break;
    if (named.st_uid != ::geteuid() && named.st_uid != 0) {
      return invalid_argument(fmt::format(
          "{}: refusing '{}': {} is a symbolic link owned by uid {}, neither you (uid {}) nor root; a link another "
          "user made could point anywhere: give the file's own path",
          what, shown, at == path ? "it" : "'" + excerpt(at, 200) + "' (where it leads)", named.st_uid, ::geteuid()));
    }
    if (links == kMaxLinks) {
      return invalid_argument(
          fmt::format("{}: '{}' leads through more than {} symbolic links; give the file's own path", what, shown,
                      kMaxLinks));
    }
    char target[PATH_MAX + 1] = {};
    const ssize_t n = ::readlinkat(probe.fd, "", target, PATH_MAX);
    if (n <= 0) return cannot(errno);
    at = link_target(at, std::string(target, static_cast<size_t>(n)));
  }
  if (!S_ISREG(named.st_mode)) {
    return invalid_argument(fmt::format("{}: '{}' is a {}, not a regular file; give the path of a file", what, shown,
                                        file_type_name(named.st_mode)));
  }
  // Non-blocking: were a FIFO swapped in since the check, open would not wait
  // for a writer; it is then refused below as not the file checked.
  ClosingFd file{::open(at.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC)};
  struct stat st{};
  if (file.fd < 0 || ::fstat(file.fd, &st) != 0) return cannot(errno);
  if (!S_ISREG(st.st_mode) || st.st_dev != named.st_dev || st.st_ino != named.st_ino) {
    return invalid_argument(fmt::format("{}: '{}' was replaced while it was opened (now a {}); give a file nobody "
                                        "is changing",
                                        what, shown, file_type_name(st.st_mode)));
  }
  auto too_large = [&] {
    return invalid_argument(fmt::format("{}: '{}' is larger than {} bytes, the most {} may be", what, shown, max_bytes,
                                        bound_name));
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large();
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(file.fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return invalid_argument(fmt::format("{}: reading '{}' failed: {}", what, shown, std::strerror(errno)));
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > max_bytes) return too_large();  // it grew while we read
  }
  std::function<void(const std::string&)> notify;
  {
    std::lock_guard lock(observer_mutex());
    notify = observer();
  }
  if (notify) notify(path);
  return text;
}

}  // namespace engram
