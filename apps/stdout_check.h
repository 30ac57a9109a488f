// Every command's output ends here: stdout is flushed and checked, so a full
// disk, a closed stdout or a reader that went away is an error on stderr
// and a non-zero exit, never a silent success with nothing written.
#pragma once

#include <string_view>

namespace engram::app {

// Flushes std::cout and C's stdout. When a write to stdout failed, now or
// earlier, says so on stderr naming `command`, and returns 1 where
// `exit_code` was 0 (a failing exit code is kept: it says more).
int finish_stdout(int exit_code, std::string_view command);

}  // namespace engram::app
