// Seeds as people write them wherever a command takes several: "7",
// "1-20", "1,5,9-12" (the same text `scenario run --seed` and the pytest
// plugin's --scenario-seeds read).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace engram {

// The most seeds one list may name: a list is run seed by seed, so a slip
// such as 0-2000000 would mean hours (and one test per seed under pytest).
inline constexpr uint64_t kMaxSeedsInList = 10'000;

// Seeds in [0, 2^64 - 1], in the order written (ranges low to high). Errors
// (invalid_argument) name `field`, the part that is wrong and the fix: not a
// seed, a range high to low, a number past 2^64 - 1, more than
// kMaxSeedsInList seeds in all.
Result<std::vector<uint64_t>> parse_seed_list(std::string_view text, std::string_view field);

}  // namespace engram
