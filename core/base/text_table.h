// A table of text as a terminal shows it: every column as wide as its
// widest cell, cells longer than a limit wrapped at spaces onto more lines
// of the same row, so columns stay aligned however long a verdict is.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace engram {

// rows[r][c]: the cell text (rows may be ragged: a missing cell is empty).
// Each column is as wide as its widest cell, at most max_cell_width
// characters (a longer word is cut there); columns are joined by
// `separator` and no line carries trailing spaces. Widths count bytes, so
// cells are expected to be ASCII (what the reports print).
std::string format_text_table(const std::vector<std::vector<std::string>>& rows, size_t max_cell_width,
                              std::string_view separator = " | ");

// `text` cut into lines of at most `width` characters at spaces (a word
// longer than `width` is cut inside). Empty text is one empty line.
std::vector<std::string> wrap_text(std::string_view text, size_t width);

}  // namespace engram
