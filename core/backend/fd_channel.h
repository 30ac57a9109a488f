// Passing file descriptors between ranks of one host (SCM_RIGHTS on a Unix
// socket in the real backend). A rank on another host is unreachable by
// construction: the socket path does not exist there.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "core/base/status.h"

namespace engram {

struct ReceivedFd {
  int fd = -1;                      // owned by the receiver, who must close it
  std::vector<std::byte> header;    // small metadata sent with the fd
};

class FdChannel {
 public:
  virtual ~FdChannel() = default;
  // `peer_rank` is a world rank. Errors are kUnavailable (peer gone, socket
  // missing, timed out) or kPermissionDenied (credentials, token).
  virtual Status send_fd(int peer_rank, int fd, std::span<const std::byte> header) = 0;
  virtual Result<ReceivedFd> recv_fd(int peer_rank) = 0;
};

}  // namespace engram
