#include "core/base/did_you_mean.h"

#include <climits>
#include <cstdint>
#include <algorithm>
#include <cctype>

namespace engram {
namespace {

std::string folded(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

size_t name_distance(std::string_view a_in, std::string_view b_in) {
  const std::string a = folded(a_in), b = folded(b_in);
  // Three rows of the dynamic programme: the swap looks two rows back.
  std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        current[j] = std::min(current[j], before[j - 2] + 1);
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::vector<std::string> closest_names(std::string_view word, std::span<const std::string> candidates) {
  // A name tens of kilobytes long is no slip; and the table is |a| x |b|.
  constexpr size_t kLongestCompared = 200;
  std::vector<std::string> out;
  if (word.size() > kLongestCompared) return out;
  size_t best = SIZE_MAX;
  for (const std::string& c : candidates) {
    if (c.size() > kLongestCompared) continue;
    const size_t d = name_distance(word, c);
    const size_t allowed = std::max<size_t>(1, std::max(word.size(), c.size()) / 3);
    if (d > allowed || d > best) continue;
    if (d < best) out.clear();
    best = d;
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates, bool quote) {
  const std::vector<std::string> names = closest_names(word, candidates);
  if (names.empty()) return "";
  auto shown = [&](const std::string& n) { return quote ? "'" + n + "'" : n; };
  std::string text = "did you mean " + shown(names[0]);
  for (size_t i = 1; i < names.size(); ++i) text += (i + 1 == names.size() ? " or " : ", ") + shown(names[i]);
  return text + "?";
}

}  // namespace engram
