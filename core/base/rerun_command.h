// The command that reruns something this process did, as a pasted line: the
// running binary's absolute path (/proc/self/exe, resolved once), then the
// arguments, each shell-quoted. Files named in it are written absolute
// (absolute_file_path), so the line works from any directory.
#pragma once

#include <string>
#include <vector>

namespace engram {

// The absolute path of the binary a rerun starts: /proc/self/exe, resolved
// on the first call; "engramlab" where it cannot be read. A process that is
// not `engramlab` but builds its lines (a test) names the binary to print
// with set_rerun_binary.
std::string rerun_binary();
void set_rerun_binary(std::string path);

// rerun_binary(), then `args`, each shell-quoted: one line to paste.
std::string rerun_command(const std::vector<std::string>& args);

// `path` made absolute against the current directory and normalised, when it
// names an existing file or directory; otherwise unchanged (a source name
// that is not a file, such as a test's inline scenario).
std::string absolute_file_path(const std::string& path);

}  // namespace engram
