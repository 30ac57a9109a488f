// The one way engramlab writes an output file (--trace, --timeline,
// --junitxml, --result-dir records, bench --csv/--svg), safe in a directory
// other users may write (/tmp, a shared result directory), as root too:
// - the text goes into a new file beside the target, created with
//   O_CREAT|O_EXCL|O_NOFOLLOW under a random name no longer than NAME_MAX
//   (a 255-byte target name works), written and fsynced, then renamed over
//   the target: a reader sees the old file or the whole new one;
// - the target must be absent or a regular file the caller owns; a symbolic
//   link (whoever made it: one planted by another user would redirect the
//   write, and a rename would silently replace the user's own), a FIFO, a
//   device, a socket, a directory, another user's file, and anything in
//   /proc or /sys are refused, naming the path and why. The null device is
//   the one exception: writing there discards the text, so it is accepted;
// - a replaced file keeps its permission bits (a private file stays private).
// The directory is opened once and every later step (the checks, the create,
// the rename) is relative to that handle, so swapping a directory component
// after the checks does not move the write.
#pragma once

#include <string>
#include <string_view>

#include "core/base/status.h"

namespace engram {

// `what` names the file in errors ("the CSV", "rank 0's record"). Errors are
// failed_precondition naming the path, what is there or the errno text, and
// the fix; the temporary is removed on every failure.
Status write_output_file(const std::string& path, std::string_view text, std::string_view what);

// The target checks of write_output_file alone, for a command to refuse a
// bad output path before it runs anything.
Status check_output_path(const std::string& path, std::string_view what);

}  // namespace engram
