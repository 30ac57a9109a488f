// After a local step that can fail on some ranks and not others, the group
// agrees: every rank learns whether any rank failed, which one and at which
// step, so nobody waits on a peer that gave up and everyone cleans up.
#pragma once

#include <string_view>

#include "core/backend/collectives.h"
#include "core/base/status.h"

namespace engram {

// Collective over `group`. When a member is gone (the round itself fails),
// returns that (kUnavailable naming it), with this rank's own failure, if
// any, appended: the dead peer is the root cause. Else returns `mine` when
// this rank failed; otherwise ok when every rank succeeded, else kUnavailable
// naming the first failed rank (world rank), its error code and step, and
// `what` this rank was doing.
// When the round itself fails because a member is gone (dead, or left
// without answering), `gone_rank` (if given) receives that member's world
// rank, so survivors can clean up what only it would have cleaned. When the
// round fails without naming anyone (a member stopped answering: its
// deadline passed), `gone_rank` receives kUnknownMemberGone: any member,
// the one that made something included, may be the one that is gone.
inline constexpr int kUnknownMemberGone = -2;
Status agree_on_status(Collectives& group, const Status& mine, std::string_view what, int* gone_rank = nullptr);

}  // namespace engram
