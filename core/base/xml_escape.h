// Text placed inside SVG or XML (titles, labels, attribute values): the
// characters markup reads escaped, so any host or scenario name stays text;
// and what XML 1.0 cannot hold at all (control characters other than tab,
// newline and carriage return; bytes that are not UTF-8; U+FFFE, U+FFFF)
// written as the text \xNN, so the document stays well-formed whatever bytes
// a file name carries (a CI dashboard rejects a whole report that is not).
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "core/base/text_excerpt.h"

namespace engram {

inline std::string xml_escape(std::string_view text) {
  std::string out;
  for (size_t at = 0; at < text.size();) {
    const char c = text[at];
    const auto byte = static_cast<unsigned char>(c);
    const size_t n = utf8_sequence_bytes(text, at);
    const bool non_character = n == 3 && byte == 0xEF && static_cast<unsigned char>(text[at + 1]) == 0xBF &&
                               static_cast<unsigned char>(text[at + 2]) >= 0xBE;
    if (n == 0 || non_character || (byte < 0x20 && c != '\t' && c != '\n' && c != '\r')) {
      for (size_t i = 0; i < (non_character ? 3 : 1); ++i)
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[at + i]));
      at += non_character ? 3 : 1;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.append(text.substr(at, n));
    }
    at += n;
  }
  return out;
}

}  // namespace engram
