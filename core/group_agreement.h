// After a local step that can fail on some ranks and not others, the group
// agrees: every rank learns whether any rank failed, which one and at which
// step, so nobody waits on a peer that gave up and everyone cleans up.
#pragma once

#include <string_view>

#include "core/backend/collectives.h"
#include "core/status.h"

namespace engram {

// Collective over `group`. Returns `mine` when this rank failed; otherwise ok
// when every rank succeeded, else kUnavailable naming the first failed rank
// (world rank), its error code and step, and `what` this rank was doing.
Status agree_on_status(Collectives& group, const Status& mine, std::string_view what);

}  // namespace engram
