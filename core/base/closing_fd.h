// A file descriptor closed when it goes out of scope: the readers and writers
// of core/base that open, check and give up on a path on any of several
// error returns.
#pragma once

#include <unistd.h>

namespace engram {

struct ClosingFd {
  int fd = -1;
  ClosingFd() = default;
  explicit ClosingFd(int opened) : fd(opened) {}
  ClosingFd(const ClosingFd&) = delete;
  ClosingFd& operator=(const ClosingFd&) = delete;
  ~ClosingFd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace engram
