#include "core/base/shell_quote.h"

#include <fmt/format.h>

namespace engram {
namespace {

bool shell_safe(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '_': case '-': case '+': case '=': case '/': case '.': case ',': case ':': case '@': case '%':
      return true;
    default:
      return false;
  }
}

bool control(unsigned char c) { return c < 0x20 || c == 0x7F; }

}  // namespace

std::string shell_quote(std::string_view word) {
  bool all_plain = !word.empty();
  bool any_control = false;
  for (size_t i = 0; i < word.size(); ++i) {
    const auto c = static_cast<unsigned char>(word[i]);
    all_plain = all_plain && shell_safe(static_cast<char>(c));
    // C1 controls (U+0080..U+009F, 0xC2 0x80..0x9F in UTF-8) act on terminals too.
    any_control = any_control || control(c) ||
                  (c == 0xC2 && i + 1 < word.size() && static_cast<unsigned char>(word[i + 1]) < 0xA0 &&
                   static_cast<unsigned char>(word[i + 1]) >= 0x80);
  }
  if (all_plain) return std::string(word);
  std::string out;
  if (any_control) {
    out = "$'";
    for (const char ch : word) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '\'' || c == '\\') out += fmt::format("\\{}", ch);
      else if (c < 0x20 || c >= 0x7F) out += fmt::format("\\x{:02x}", c);
      else out += ch;
    }
    return out + "'";
  }
  out = "'";
  for (const char ch : word) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string shell_command(std::span<const std::string> args) {
  std::string out;
  for (const std::string& arg : args) {
    if (!out.empty()) out += ' ';
    out += shell_quote(arg);
  }
  return out;
}

}  // namespace engram
