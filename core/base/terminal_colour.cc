#include "core/base/terminal_colour.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace engram {
namespace {

constexpr std::string_view kGreen = "\x1b[32m", kRed = "\x1b[31m", kYellow = "\x1b[33m", kReset = "\x1b[0m";

// Every `word` in `line` wrapped in `colour`.
void paint(std::string& line, std::string_view word, std::string_view colour) {
  size_t at = 0;
  while ((at = line.find(word, at)) != std::string::npos) {
    line.insert(at + word.size(), kReset);
    line.insert(at, colour);
    at += colour.size() + word.size() + kReset.size();
  }
}

}  // namespace

bool colour_wanted(int fd) {
  const char* no_colour = std::getenv("NO_COLOR");
  if (no_colour != nullptr && no_colour[0] != '\0') return false;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return false;
  return ::isatty(fd) == 1;
}

std::string colour_report(std::string_view report) {
  std::string out;
  out.reserve(report.size() + report.size() / 8);
  size_t start = 0;
  while (start < report.size()) {
    size_t end = report.find('\n', start);
    if (end == std::string_view::npos) end = report.size();
    std::string line(report.substr(start, end - start));
    if (line.starts_with("verdict")) paint(line, " fits", kGreen);
    paint(line, "cannot run", kRed);
    paint(line, "refused", kRed);
    paint(line, "(over)", kRed);
    paint(line, "error:", kRed);
    paint(line, "(low)", kYellow);
    if (line.starts_with("  [") && line.find("] ") != std::string::npos) {
      line.insert(line.find("] ") + 1, kReset);
      line.insert(2, kYellow);
    }
    out += line;
    if (end < report.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

}  // namespace engram
