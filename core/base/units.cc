#include "core/base/units.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <limits>

#include "core/base/text_excerpt.h"

namespace engram {

Result<uint64_t> parse_bytes(std::string_view text, std::string_view field, SizeUnits units) {
  auto bad = [&](std::string_view why) {
    return invalid_argument(fmt::format(
        "{}: '{}' is not a size ({}); write a number with a unit, e.g. 64MiB, 190Gi, 190GiB or 190GB (Gi and "
        "GiB are powers of 1024, GB of 1000, G {})",
        field, excerpt(text), why, units == SizeUnits::kKubernetes ? "of 1000 in a Kubernetes quantity" : "of 1024"));
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

  // Binary: Ki/KiB ... Pi/PiB; decimal: KB ... PB; a letter alone by context.
  constexpr std::string_view kLetters = "kmgtp";
  long double multiplier = 0;
  const long double decimal_step = 1000.0L, binary_step = 1024.0L;
  auto power = [](long double step, size_t n) {
    long double m = 1;
    for (size_t i = 0; i <= n; ++i) m *= step;
    return m;
  };
  const size_t letter = unit.empty() ? std::string::npos : kLetters.find(unit[0]);
  const std::string_view rest = unit.empty() ? std::string_view() : std::string_view(unit).substr(1);
  if (unit == "b") multiplier = 1;
  else if (letter != std::string::npos && (rest == "i" || rest == "ib")) multiplier = power(binary_step, letter);
  else if (letter != std::string::npos && rest == "b") multiplier = power(decimal_step, letter);
  else if (letter != std::string::npos && rest.empty())
    multiplier = power(units == SizeUnits::kKubernetes ? decimal_step : binary_step, letter);
  else return bad("unknown unit '" + excerpt(unit, 16) + "'");

  char* end = nullptr;
  long double value = std::strtold(number.c_str(), &end);
  if (end != number.c_str() + number.size()) return bad("malformed number");
  // Fractions of a unit ("189.9GiB") round to the nearest byte.
  long double bytes = std::nearbyint(value * multiplier);
  if (!(bytes <= static_cast<long double>(kMaxSizeBytes))) return bad("larger than 1 EiB");
  return static_cast<uint64_t>(bytes);
}

std::optional<std::string> kubernetes_letter_reading(std::string_view text, uint64_t bytes) {
  size_t end = text.size();
  while (end > 0 && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  if (end < 2) return std::nullopt;
  const char letter = static_cast<char>(std::toupper(static_cast<unsigned char>(text[end - 1])));
  const char before = text[end - 2];
  if (std::string_view("KMGTP").find(letter) == std::string_view::npos) return std::nullopt;
  if (!(std::isdigit(static_cast<unsigned char>(before)) || before == '.' || before == ' ')) return std::nullopt;
  const size_t power = std::string_view("KMGTP").find(letter) + 1;
  const std::string number(text.substr(0, end - 1));
  const std::string trimmed = number.substr(0, number.find_last_not_of(' ') + 1);
  return fmt::format("{}{} = {} x 10^{} B = {:.2f} GiB (a Kubernetes quantity; {}{}i is {} x 2^{})", trimmed, letter,
                     trimmed, 3 * power, static_cast<double>(bytes) / static_cast<double>(kGiB), trimmed, letter,
                     trimmed, 10 * power);
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

std::string format_signed_gib(int64_t bytes) {
  // -(bytes + 1) + 1: the magnitude without negating INT64_MIN.
  return bytes < 0 ? "-" + format_gib(static_cast<uint64_t>(-(bytes + 1)) + 1) : format_gib(static_cast<uint64_t>(bytes));
}

std::string format_bytes(uint64_t bytes) {
  if (bytes >= kGiB) return format_gib(bytes);
  if (bytes >= kMiB) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / kMiB);
  if (bytes >= kKiB) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / kKiB);
  return fmt::format("{} B", bytes);
}

}  // namespace engram
