#include "core/base/text_table.h"

#include <algorithm>

namespace engram {

std::vector<std::string> wrap_text(std::string_view text, size_t width) {
  std::vector<std::string> lines;
  if (width == 0) width = 1;
  std::string line;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    size_t end = text.find(' ', i);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(i, end - i);
    i = end;
    if (word.empty()) break;
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(std::move(line));
      line.clear();
    }
    while (word.size() > width) {  // a word wider than the column: cut
      if (!line.empty()) {
        lines.push_back(std::move(line));
        line.clear();
      }
      lines.emplace_back(word.substr(0, width));
      word.remove_prefix(width);
    }
    if (!word.empty()) line += (line.empty() ? "" : " ") + std::string(word);
  }
  if (!line.empty() || lines.empty()) lines.push_back(std::move(line));
  return lines;
}

std::string format_text_table(const std::vector<std::vector<std::string>>& rows, size_t max_cell_width,
                              std::string_view separator) {
  size_t columns = 0;
  for (const auto& row : rows) columns = std::max(columns, row.size());
  // Every cell as its wrapped lines; each column as wide as its widest line.
  std::vector<std::vector<std::vector<std::string>>> wrapped(rows.size());
  std::vector<size_t> width(columns, 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    wrapped[r].resize(columns);
    for (size_t c = 0; c < columns; ++c) {
      const std::string_view cell = c < rows[r].size() ? std::string_view(rows[r][c]) : std::string_view();
      wrapped[r][c] = wrap_text(cell, max_cell_width);
      for (const std::string& line : wrapped[r][c]) width[c] = std::max(width[c], line.size());
    }
  }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    size_t height = 1;
    for (const auto& cell : wrapped[r]) height = std::max(height, cell.size());
    for (size_t l = 0; l < height; ++l) {
      std::string line;
      for (size_t c = 0; c < columns; ++c) {
        const std::string text = l < wrapped[r][c].size() ? wrapped[r][c][l] : "";
        if (c > 0) line += separator;
        line += text;
        if (c + 1 < columns) line.append(width[c] - text.size(), ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
  }
  return out;
}

}  // namespace engram
