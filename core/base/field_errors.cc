#include "core/base/field_errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string_view>

namespace engram {
namespace {

// The "line L, column C" that YamlFields writes after the source name.
void position_of(std::string_view text, size_t& line, size_t& column) {
  const size_t at = text.find(": line ");
  if (at == std::string_view::npos) return;
  const char* p = text.data() + at + 7;
  const char* end = text.data() + text.size();
  auto [after_line, ec] = std::from_chars(p, end, line);
  if (ec != std::errc()) return;
  constexpr std::string_view kColumn = ", column ";
  if (std::string_view(after_line, end - after_line).rfind(kColumn, 0) == 0)
    std::from_chars(after_line + kColumn.size(), end, column);
}

}  // namespace

bool FieldErrors::add(const Status& status) {
  if (status.is_ok()) return true;
  if (first_code_ == ErrorCode::kOk) first_code_ = status.code();
  std::string_view message = status.message();
  while (!message.empty()) {
    const size_t nl = std::min(message.find('\n'), message.size());
    Entry e;
    e.text = std::string(message.substr(0, nl));
    message.remove_prefix(std::min(nl + 1, message.size()));
    if (e.text.empty()) continue;
    if (std::any_of(errors_.begin(), errors_.end(), [&](const Entry& o) { return o.text == e.text; })) continue;
    position_of(e.text, e.line, e.column);
    errors_.push_back(std::move(e));
  }
  return false;
}

Status FieldErrors::status() const {
  if (errors_.empty()) return Status::ok();
  if (errors_.size() == 1) return Status(first_code_, errors_.front().text);
  std::vector<Entry> sorted = errors_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) {
    return a.line != b.line ? a.line < b.line : a.column < b.column;
  });
  std::string message;
  for (size_t i = 0; i < sorted.size() && i < kMaxListed; ++i) message += (i ? "\n" : "") + sorted[i].text;
  if (sorted.size() > kMaxListed) {
    message += fmt::format("\n... and {} more errors; fix these and run again", sorted.size() - kMaxListed);
  }
  return invalid_argument(message);
}

}  // namespace engram
