// Lists in messages stay short on 1,000-rank deployments: "a, b, c, d and 284 more";
// rank sets print as ranges: "0-3, 8-11".
#pragma once

#include <span>
#include <string>
#include <vector>

namespace engram {

std::string join_limited(std::span<const std::string> items, size_t max_shown = 4);

// `ranks` need not be sorted; duplicates are ignored. "0-3, 8, 10-11".
std::string compress_ranges(std::vector<int> ranks);

}  // namespace engram
