#include "apps/stdout_check.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

namespace engram::app {

int finish_stdout(int exit_code, std::string_view command) {
  errno = 0;  // std::cout flushes through stdout's buffer: either may fail first
  std::cout.flush();
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && std::ferror(stdout) == 0 && !std::cout.fail()) return exit_code;
  const std::string why = err != 0 ? std::strerror(err) : "an earlier write failed";
  std::fprintf(stderr,
               "engramlab %.*s: writing to stdout failed (%s): its output is missing or cut short; send it where it "
               "can be written\n",
               static_cast<int>(command.size()), command.data(), why.c_str());
  return exit_code == 0 ? 1 : exit_code;
}

}  // namespace engram::app
