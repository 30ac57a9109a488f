#include "core/base/file_replace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/base/text_excerpt.h"

namespace engram {
namespace {

// Enough tries that only a directory filled on purpose runs out of them.
constexpr int kMaxNameAttempts = 64;

std::string random_suffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format(".{:016x}.tmp", rng());
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

}  // namespace

Status replace_file_contents(const std::string& path, std::string_view text, std::string_view what) {
  const std::string shown = excerpt(path, 200);
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < kMaxNameAttempts && fd < 0; ++attempt) {
    tmp = path + random_suffix();
    // 0666 less the umask, as a plain create would give.
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return failed_precondition(fmt::format("cannot create {} next to '{}': {}; give a directory you may write", what,
                                           shown, std::strerror(errno)));
  }
  Status written = write_all(fd, text);
  if (::close(fd) != 0 && written.is_ok()) written = failed_precondition(std::strerror(errno));
  if (!written.is_ok()) {
    ::unlink(tmp.c_str());
    return failed_precondition(fmt::format("cannot write {} to '{}': {}; check the space and permissions there", what,
                                           excerpt(tmp, 200), written.message()));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return failed_precondition(fmt::format("cannot rename {} into place at '{}': {}; give a path you may replace",
                                           what, shown, std::strerror(err)));
  }
  return Status::ok();
}

Status write_output_file(const std::string& path, std::string_view text, std::string_view what) {
  // Opened without O_CREAT or O_TRUNC, so a regular file found here is left
  // as it is and replaced instead; only a stream is written through.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return replace_file_contents(path, text, what);
  struct stat st{};
  if (::fstat(fd, &st) != 0 || S_ISREG(st.st_mode)) {
    ::close(fd);
    return replace_file_contents(path, text, what);
  }
  Status written = write_all(fd, text);
  if (::close(fd) != 0 && written.is_ok()) written = failed_precondition(std::strerror(errno));
  if (!written.is_ok()) {
    return failed_precondition(
        fmt::format("cannot write {} to '{}': {}; give a writable path", what, excerpt(path, 200), written.message()));
  }
  return Status::ok();
}

}  // namespace engram
