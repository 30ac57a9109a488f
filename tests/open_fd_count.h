// How many fds this process has open (/proc/self/fd), for tests that check
// every fd is back at its baseline after a real exchange.
#pragma once

#include <dirent.h>

namespace engram::testing {

inline int open_fd_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n - 1;  // the directory stream's own fd
}

}  // namespace engram::testing
