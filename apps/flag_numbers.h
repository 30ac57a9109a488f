// Whole-number flags, read alike by every command: from the text as typed
// (an unsigned option would take -1 as 2^64-1), within a range, with one
// error form -- "--seed: '-1' is not a whole number in [0, N]; write e.g.
// --seed 1" -- that the command turns into exit 2. Lists ("--tokens
// 1,64,8192") are read item by item the same way.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/base/text_excerpt.h"

namespace engram::app {

template <typename T>
Status flag_range_error(std::string_view flag, std::string_view text, T min_value, T max_value) {
  const T example = std::min(std::max(min_value, T{1}), max_value);
  return invalid_argument(fmt::format("{}: '{}' is not a whole number in [{}, {}]; write e.g. {} {}", flag,
                                      excerpt(text), min_value, max_value, flag, example));
}

template <typename T>
Result<T> whole_number_flag(std::string_view flag, std::string_view text, T min_value, T max_value) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min_value || value > max_value) {
    return flag_range_error(flag, text, min_value, max_value);
  }
  return value;
}

// A comma-separated list of them ("1,64,8192"), each read as above.
template <typename T>
Result<std::vector<T>> whole_number_list_flag(std::string_view flag, std::string_view text, T min_value, T max_value) {
  std::vector<T> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    ENGRAM_ASSIGN_OR_RETURN(T value, whole_number_flag<T>(flag, text.substr(at, comma - at), min_value, max_value));
    out.push_back(value);
    at = comma + 1;
  }
  return out;
}

}  // namespace engram::app
