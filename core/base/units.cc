#include "core/base/units.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <limits>

#include "core/base/text_excerpt.h"

namespace engram {

Result<uint64_t> parse_bytes(std::string_view text, std::string_view field) {
  auto bad = [&](std::string_view why) {
    return invalid_argument(fmt::format(
        "{}: '{}' is not a size ({}); write a number with a unit, e.g. 64MiB, 190GiB or 190GB (GiB and G are "
        "powers of 1024, GB of 1000)",
        field, excerpt(text), why));
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i < text.size() && text[i] == '-') return bad("sizes cannot be negative");
  size_t start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == start) return bad("no number");
  std::string number(text.substr(start, i - start));
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) break;
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != text.size()) return bad("trailing text");
  if (unit.empty()) {
    // "141" meant 141 bytes to a parser and 141 GiB to the person who wrote
    // it: make them say which.
    return invalid_argument(fmt::format(
        "{}: '{}' has no unit; write {}GiB (powers of 1024, as G in docker --shm-size), {}GB (powers of 1000) or "
        "{}B for bytes",
        field, excerpt(text), excerpt(number, 24), excerpt(number, 24), excerpt(number, 24)));
  }

  long double multiplier = 0;
  if (unit == "b") multiplier = 1;
  else if (unit == "k" || unit == "kib") multiplier = kKiB;
  else if (unit == "m" || unit == "mib") multiplier = kMiB;
  else if (unit == "g" || unit == "gib") multiplier = kGiB;
  else if (unit == "t" || unit == "tib") multiplier = static_cast<long double>(kGiB) * 1024;
  else if (unit == "kb") multiplier = 1e3;
  else if (unit == "mb") multiplier = 1e6;
  else if (unit == "gb") multiplier = 1e9;
  else if (unit == "tb") multiplier = 1e12;
  else return bad("unknown unit '" + excerpt(unit, 16) + "'");

  char* end = nullptr;
  long double value = std::strtold(number.c_str(), &end);
  if (end != number.c_str() + number.size()) return bad("malformed number");
  // Fractions of a unit ("189.9GiB") round to the nearest byte.
  long double bytes = std::nearbyint(value * multiplier);
  if (!(bytes <= static_cast<long double>(kMaxSizeBytes))) return bad("larger than 1 EiB");
  return static_cast<uint64_t>(bytes);
}

Result<double> parse_fraction(std::string_view text, std::string_view field) {
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || errno != 0 || !(value > 0.0 && value <= 1.0)) {
    return invalid_argument(fmt::format("{}: '{}' is not a fraction in (0, 1]; write e.g. 0.9", field, excerpt(text)));
  }
  return value;
}

std::string format_gib(uint64_t bytes) {
  return fmt::format("{:.3f} GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
}

std::string format_bytes(uint64_t bytes) {
  if (bytes >= kGiB) return format_gib(bytes);
  if (bytes >= kMiB) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / kMiB);
  if (bytes >= kKiB) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / kKiB);
  return fmt::format("{} B", bytes);
}

}  // namespace engram
