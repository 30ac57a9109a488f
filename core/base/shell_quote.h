// Command lines printed for a person to paste into a POSIX shell (the
// "reproduce:" lines): each argument quoted so the shell hands it back as
// one word, byte for byte.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace engram {

// `arg` unchanged when it holds only characters no shell treats specially
// (letters, digits and _ - + = / . , : @ %), else in single quotes, each '
// written as '\''. The empty string is ''. With control characters (C0, DEL
// or C1), in $'...' with \xNN escapes (bash, zsh, ksh and POSIX.1-2024 sh
// read those), so the line is safe in a terminal too.
std::string shell_quote(std::string_view arg);

// The arguments, each shell_quote()d, joined by single spaces.
std::string shell_command(std::span<const std::string> args);

}  // namespace engram
