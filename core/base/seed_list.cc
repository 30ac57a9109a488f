#include "core/base/seed_list.h"

#include <fmt/format.h>

#include <charconv>

#include "core/base/text_excerpt.h"

namespace engram {

Result<std::vector<uint64_t>> parse_seed_list(std::string_view text, std::string_view field) {
  std::vector<uint64_t> seeds;
  uint64_t count = 0;
  auto number = [&](std::string_view part, std::string_view digits) -> Result<uint64_t> {
    while (!digits.empty() && digits.front() == ' ') digits.remove_prefix(1);
    while (!digits.empty() && digits.back() == ' ') digits.remove_suffix(1);
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec == std::errc::result_out_of_range)
      return invalid_argument(fmt::format("{} {}: '{}' is past the largest seed, 2^64 - 1 = 18446744073709551615",
                                          field, excerpt(text), excerpt(part)));
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      return invalid_argument(fmt::format("{} {}: '{}' is not a seed or a range of seeds; write e.g. 7, 1-20 or "
                                          "1,5,9-12",
                                          field, excerpt(text), excerpt(part)));
    return value;
  };
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view part = text.substr(start, comma - start);
    const size_t dash = part.find('-');
    ENGRAM_ASSIGN_OR_RETURN(const uint64_t low, number(part, part.substr(0, dash)));
    uint64_t high = low;
    if (dash != std::string_view::npos) {
      ENGRAM_ASSIGN_OR_RETURN(high, number(part, part.substr(dash + 1)));
    }
    if (high < low)
      return invalid_argument(fmt::format("{} {}: '{}' runs high to low; write the range low to high ({}-{})", field,
                                          excerpt(text), excerpt(part), high, low));
    const uint64_t span = high - low;  // one less than the range's seeds (no overflow at 0-(2^64-1))
    if (span >= kMaxSeedsInList || count + span + 1 > kMaxSeedsInList)
      return invalid_argument(fmt::format("{} {}: more than {} seeds; run a smaller range (each seed is one run), "
                                          "or a sweep with `engramlab fuzz --seeds N`",
                                          field, excerpt(text), kMaxSeedsInList));
    for (uint64_t s = low;; ++s) {
      seeds.push_back(s);
      if (s == high) break;
    }
    count += span + 1;
    start = comma + 1;
    if (comma == text.size()) break;
  }
  return seeds;
}

}  // namespace engram
