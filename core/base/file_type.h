// What a path holds, in words for messages: "regular file", "FIFO", ...
#pragma once

#include <sys/stat.h>

#include <string>

namespace engram {

inline std::string file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISLNK(mode)) return "symbolic link";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "device file";
  return "special file";
}

}  // namespace engram
