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

// The line that reruns the test this process is running: set by the tests'
// main (tests/test_main.cc) as each test starts, cleared as it ends; empty
// outside a test.
void set_rerun_test_line(std::string line);
std::string rerun_test_line();

// rerun_command(args), except inside a test of a binary that named no rerun
// binary: `args` are engramlab's, which a test binary does not take, so the
// line reruns the running test instead.
std::string rerun_command_or_test(const std::vector<std::string>& args);

// rerun_binary(), then `args`, each shell-quoted: one line to paste.
std::string rerun_command(const std::vector<std::string>& args);

// `path` made absolute against the current directory and normalised, when it
// names an existing file or directory; otherwise unchanged (a source name
// that is not a file, such as a test's inline scenario).
std::string absolute_file_path(const std::string& path);

}  // namespace engram
