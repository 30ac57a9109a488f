#include "core/base/text_excerpt.h"

#include <fmt/format.h>

namespace engram {

size_t utf8_sequence_bytes(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  size_t length = 0;
  uint32_t min_code = 0;
  uint32_t code = 0;
  if ((lead & 0xE0) == 0xC0) length = 2, min_code = 0x80, code = lead & 0x1F;
  else if ((lead & 0xF0) == 0xE0) length = 3, min_code = 0x800, code = lead & 0x0F;
  else if ((lead & 0xF8) == 0xF0) length = 4, min_code = 0x10000, code = lead & 0x07;
  else return 0;
  if (at + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(at + i) & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
  if (code < min_code || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return 0;
  return length;
}

namespace {

// Unicode's bidirectional formatting characters (U+061C, U+200E, U+200F,
// U+202A..U+202E, U+2066..U+2069): shown raw, they reorder what a terminal
// displays around them, so a name can pose as another (U+202E, the
// right-to-left override, "Trojan Source").
bool is_bidi_control(std::string_view text, size_t at, size_t n) {
  if (n == 2) return static_cast<unsigned char>(text[at]) == 0xD8 && static_cast<unsigned char>(text[at + 1]) == 0x9C;
  if (n != 3 || static_cast<unsigned char>(text[at]) != 0xE2) return false;
  const auto b1 = static_cast<unsigned char>(text[at + 1]);
  const auto b2 = static_cast<unsigned char>(text[at + 2]);
  if (b1 == 0x80) return b2 == 0x8E || b2 == 0x8F || (b2 >= 0xAA && b2 <= 0xAE);
  return b1 == 0x81 && b2 >= 0xA6 && b2 <= 0xA9;
}

uint32_t code_point(std::string_view text, size_t at, size_t n) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(text[at + i])); };
  return n == 2 ? ((b(0) & 0x1F) << 6) | (b(1) & 0x3F) : ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
}

}  // namespace

bool has_control_characters(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t n = utf8_sequence_bytes(text, i);
    if (n > 1 && is_bidi_control(text, i, n)) return true;
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7F) return true;
    if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) < 0xA0)
      return true;
  }
  return false;
}

std::string excerpt(std::string_view text, size_t max_bytes) {
  std::string out;
  size_t at = 0;
  while (at < text.size() && at < max_bytes) {
    const unsigned char c = static_cast<unsigned char>(text[at]);
    const size_t n = utf8_sequence_bytes(text, at);
    // C0, DEL and the C1 controls (U+0080..U+009F: 0xC2 0x80..0x9F), which
    // terminals act on too (0xC2 0x9B is CSI).
    const bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(text[at + 1]) < 0xA0;
    if (c1) {
      out += fmt::format("\\x{:02x}\\x{:02x}", c, static_cast<unsigned char>(text[at + 1]));
      at += 2;
      continue;
    }
    if (n == 0 || c < 0x20 || c == 0x7F) {
      if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else out += fmt::format("\\x{:02x}", c);
      ++at;
      continue;
    }
    if (n > 1 && is_bidi_control(text, at, n)) {
      out += fmt::format("\\u{{{:04x}}}", code_point(text, at, n));
      at += n;
      continue;
    }
    if (at + n > max_bytes) break;  // never cut a character in half
    out.append(text.substr(at, n));
    at += n;
  }
  if (at < text.size()) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace engram
