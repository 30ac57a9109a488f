// Every member's text of any length, in group-rank order: one all_gather of
// the lengths, one of the texts padded to the longest. For facts too varied
// for a fixed record (a whole host's, as `doctor` gathers them on a launched
// job); gather_facts.h is the fixed-size path the runtime uses.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/backend/collectives.h"
#include "core/base/status.h"

namespace engram {

// At most this many bytes a member: a host's facts are a few KiB.
inline constexpr size_t kGatheredTextBytesMax = 1u << 20;

// Collective over `group`. invalid_argument when this member's text is
// longer than kGatheredTextBytesMax (every member then fails alike, naming
// the longest); otherwise the all_gather's own errors.
Result<std::vector<std::string>> all_gather_strings(Collectives& group, std::string_view mine);

}  // namespace engram
