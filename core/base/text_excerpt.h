// Values echoed in errors: whatever a user (or a hostile file) wrote, an
// error shows at most a readable excerpt of it, so a 20 MB line cannot make
// a 20 MB message and stray bytes cannot garble a terminal or a log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace engram {

inline constexpr size_t kExcerptBytes = 64;
// For values echoed outside errors (host names, paths, addresses in
// reports): long enough for any real one, short enough for a line.
inline constexpr size_t kEchoedValueBytes = 256;

// `text` when it is short printable UTF-8; otherwise its first
// `max_bytes` bytes (cut at a character boundary) with "... (N bytes)"
// after them. Control characters (C0, DEL, C1) and bytes that are not valid
// UTF-8 appear as \xNN (\n, \t as themselves escaped), so the result is
// valid UTF-8 that cannot move a terminal's cursor or retitle its window.
std::string excerpt(std::string_view text, size_t max_bytes = kExcerptBytes);

// Whether `text` holds a C0, DEL or C1 control character.
bool has_control_characters(std::string_view text);

// Length of the valid UTF-8 sequence starting at text[at], 0 when it is not one.
size_t utf8_sequence_bytes(std::string_view text, size_t at);

}  // namespace engram
