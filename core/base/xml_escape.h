// Text placed inside SVG or XML (titles, labels, attribute values): the
// characters markup reads escaped, so any host or scenario name stays text.
#pragma once

#include <string>
#include <string_view>

namespace engram {

inline std::string xml_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace engram
