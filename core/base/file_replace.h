// Replacing a file's contents in a directory other users may write (a shared
// result directory, /tmp): the text goes into a new file under a random name
// there, created with O_CREAT|O_EXCL|O_NOFOLLOW so no planted name or symlink
// is ever opened, then renamed over the destination. A reader sees the old
// file or the whole new one, and a symlink at the destination is replaced,
// not written through.
#pragma once

#include <string>
#include <string_view>

#include "core/base/status.h"

namespace engram {

// `what` names the file in errors ("the rank record", "the CSV"). Errors are
// failed_precondition, naming the path, the errno text and the fix; the
// temporary is removed on every failure.
Status replace_file_contents(const std::string& path, std::string_view text, std::string_view what);

// For an output path the user named (`--csv`, `--svg`): a device or FIFO
// there (/dev/stdout, a pipe) is written through, as a shell's `>` would;
// anything else, a symlink to a regular file included, is replaced as above.
Status write_output_file(const std::string& path, std::string_view text, std::string_view what);

}  // namespace engram
