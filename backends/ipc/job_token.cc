#include "backends/ipc/job_token.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backends/ipc/fd_limit.h"

namespace engram::ipc {

Result<std::string> random_job_token() {
  unsigned char raw[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_failed(errno, "/dev/urandom for the job token");
  size_t got = 0;
  while (got < sizeof(raw)) {
    const ssize_t n = ::read(fd, raw + got, sizeof(raw) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return failed_precondition("short read from /dev/urandom for the job token");
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char byte : raw) {
    token += kHex[byte >> 4];
    token += kHex[byte & 15];
  }
  return token;
}

bool tokens_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace engram::ipc
