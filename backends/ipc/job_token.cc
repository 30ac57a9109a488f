#include "backends/ipc/job_token.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>

#include "backends/ipc/fd_limit.h"
#include "backends/ipc/hmac_sha256.h"
#include "core/backend/host_shared_memory.h"

namespace engram::ipc {
namespace {

std::string lower_hex(std::span<const unsigned char> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : bytes) {
    text += kHex[byte >> 4];
    text += kHex[byte & 15];
  }
  return text;
}

}  // namespace

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
  return lower_hex(raw);
}

std::string shm_name_part(const std::string& job_token, const std::string& job_id) {
  HmacSha256 mac(bytes_of(job_token));
  mac.update(bytes_of(std::string_view("engramlab shm names 1\0", 22)));
  mac.update(bytes_of(job_id));
  const Sha256Digest digest = mac.finish();
  const std::string part = lower_hex(std::span(digest).first(kShmNamePartChars / 2));
  ENGRAM_CHECK(is_shm_name_part(part));
  return part;
}

bool tokens_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace engram::ipc
