// The one way engramlab reads an input file (deployment and scenario YAML,
// model files, GPU files, calibration files): read whole, once, from a
// regular file within a byte bound, without hanging on a FIFO or touching a
// device.
//
// The link rule: a symbolic link at the named path is followed only when it
// is the user's own (owned by the caller) or the system's (owned by root);
// a link owned by another user is refused, naming its owner, since one
// planted in a shared directory (/tmp) would decide what is read. The same
// rule applies to the links it leads to (at most 8). Directory components
// are resolved by the kernel as usual.
//
// The file is first opened with O_PATH|O_NOFOLLOW (no side effect whatever
// it is) and checked, then opened O_RDONLY|O_NONBLOCK|O_NOFOLLOW and checked
// to be the same file, fstat'ed, and read once: callers parse that text and
// never read the path again, so a file changed meanwhile cannot make a
// check and its use disagree.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace engram {

// `what` names the input in errors ("model file", "--file"); `bound_name`
// says what the bound is for ("a deployment or scenario file"). Errors are
// invalid_argument naming what, the path, what is there, and the fix.
Result<std::string> read_input_file(const std::string& path, std::string_view what, size_t max_bytes,
                                    std::string_view bound_name);

// Tests only: called with the path after each successful read, so a test can
// count the reads of one input and change the file right after it was read.
void set_input_read_observer(std::function<void(const std::string& path)> observer);

}  // namespace engram
