#include "core/base/fixes_once.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

namespace engram {
namespace {

std::vector<std::string> clauses_of(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = line.find("; ", start);
    out.push_back(line.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 2;
  }
  return out;
}

}  // namespace

std::vector<std::string> say_fixes_once(const std::vector<std::string>& lines, size_t min_chars) {
  std::map<std::string, int> lines_with;  // clause -> how many lines hold it
  std::vector<std::vector<std::string>> split;
  for (const std::string& line : lines) {
    split.push_back(clauses_of(line));
    std::map<std::string, bool> seen_here;
    for (const std::string& c : split.back())
      if (c.size() >= min_chars && !seen_here[c]) {
        seen_here[c] = true;
        ++lines_with[c];
      }
  }
  std::map<std::string, int> number;  // repeated clause -> its fix number, once said
  std::vector<std::string> out;
  for (const std::vector<std::string>& clauses : split) {
    std::string line;
    std::vector<int> refs;  // consecutive references not yet written
    auto flush_refs = [&]() {
      if (refs.empty()) return;
      const bool run = refs.size() > 1 && refs.back() - refs.front() == static_cast<int>(refs.size()) - 1;
      std::string text;
      if (refs.size() == 1) text = fmt::format("(fix {} above)", refs.front());
      else if (run) text = fmt::format("(fixes {}-{} above)", refs.front(), refs.back());
      else text = fmt::format("(fixes {} above)", fmt::join(refs, ", "));
      line += (line.empty() ? "" : "; ") + text;
      refs.clear();
    };
    for (const std::string& c : clauses) {
      auto it = lines_with.find(c);
      if (it == lines_with.end() || it->second < 2) {
        flush_refs();
        line += (line.empty() ? "" : "; ") + c;
        continue;
      }
      if (auto n = number.find(c); n != number.end()) {
        refs.push_back(n->second);
        continue;
      }
      flush_refs();
      const int n = static_cast<int>(number.size()) + 1;
      number[c] = n;
      line += (line.empty() ? "" : "; ") + fmt::format("[fix {}] {}", n, c);
    }
    flush_refs();
    out.push_back(std::move(line));
  }
  return out;
}

std::string say_fixes_once_in(const std::string& text, size_t min_chars) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  std::string out;
  for (const std::string& line : say_fixes_once(lines, min_chars)) out += (out.empty() ? "" : "\n") + line;
  return out;
}

}  // namespace engram
