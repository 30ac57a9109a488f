// Lists in messages stay short on 1,000-rank deployments: "a, b, c, d and 284 more";
// rank sets print as ranges: "0-3, 8-11".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace engram {

std::string join_limited(std::span<const std::string> items, size_t max_shown = 4);

// "a, b,c" -> {"a", "b", "c"}: a flag's comma-separated names, each trimmed
// of spaces; empty items kept (the caller refuses them by name).
std::vector<std::string> comma_list(std::string_view text);

// Natural order of names: digit runs compare as numbers ("n2" before "n10").
bool natural_less(const std::string& a, const std::string& b);

// Host names as messages list them: in natural order, whatever order a
// deployment or the ranks' gathered facts found them in, so `plan` and the
// runtime word one deployment alike.
std::string join_names(std::vector<std::string> names, size_t max_shown = 4);

// `ranks` need not be sorted; duplicates are ignored. "0-3, 8, 10-11".
std::string compress_ranges(std::vector<int> ranks);

// "[begin, end)" of `count` items from `begin`, for an error message about a
// bad range: the end is computed without overflow (a bad begin + count can
// pass int64; it then reads "[1, 1 + 9223372036854775807)").
std::string half_open_range_text(int64_t begin, int64_t count);

}  // namespace engram
