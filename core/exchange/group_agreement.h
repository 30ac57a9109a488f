// After a local step that can fail on some ranks and not others, the group
// agrees: every rank learns whether any rank failed, which one, at which
// step and with which peer, so nobody waits on a peer that gave up and
// everyone cleans up. One protocol with one wire record, used by the runtime
// (/dev/shm tables, device shards), the handle exchange and the peer-shard
// table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/backend/collectives.h"
#include "core/base/status.h"

namespace engram {

// What each rank tells the group after a step, as it travels (fixed size,
// explicit padding). The step name is carried as text, cut to
// kAgreementStepChars - 1 characters, so any step a backend names arrives.
inline constexpr size_t kAgreementStepChars = 32;
struct AgreementRecord {
  int32_t world_rank = -1;
  uint8_t ok = 1;
  uint8_t code = 0;  // ErrorCode of a failure
  uint8_t pad[2] = {};
  int32_t peer = -1;      // the peer the failure involved (world rank), -1 for none
  int32_t progress = 0;   // how far the rank got (e.g. how many peers its POSIX sends reached)
  char step[kAgreementStepChars] = {};
};
static_assert(sizeof(AgreementRecord) == 48);

inline constexpr int kUnknownMemberGone = -2;

struct GroupVerdict {
  // Ok when every rank succeeded. When a member is gone (the round itself
  // failed): that, kUnavailable naming it, with this rank's own failure (if
  // any) appended: the dead peer is the root cause. Else `mine` when this
  // rank failed; else kUnavailable naming the first failed rank (world
  // rank), its step, peer and error code, and `what` the group was doing,
  // with peer = that rank and step = its step.
  Status status;
  // The member that was gone when the round failed (world rank), else -1.
  // kUnknownMemberGone when the round failed naming nobody (a member stopped
  // answering: its deadline passed): any member, the one that made
  // something included, may be the one that is gone.
  int gone_rank = -1;
  // A member other than this rank failed (the round itself succeeded).
  bool peer_failed = false;

  // What every member sent, in group-rank order, each a record and then its
  // payload (stride_bytes in all); null when the round failed. Shared, not
  // copied, where one process runs many members (the emulator).
  std::shared_ptr<const std::vector<std::byte>> gathered;
  size_t stride_bytes = 0;

  bool round_ok() const { return gathered != nullptr; }
  size_t member_count() const { return round_ok() ? gathered->size() / stride_bytes : 0; }
  // Member `group_rank`'s record and payload; only after a round that worked.
  AgreementRecord record(size_t group_rank) const;
  std::span<const std::byte> payload(size_t group_rank) const;
};

// Collective over `group`: one all_gather of every rank's record plus an
// optional fixed-size payload (equal size on every rank; e.g. a FABRIC
// handle travels with the outcome of its export).
GroupVerdict agree_on_outcome(Collectives& group, const Status& mine, std::string_view what, int progress = 0,
                              std::span<const std::byte> payload = {});

// The verdict's status alone. `gone_rank` (if given) receives the member
// that was gone when the round failed, so survivors can clean up what only
// it would have cleaned.
Status agree_on_status(Collectives& group, const Status& mine, std::string_view what, int* gone_rank = nullptr);

}  // namespace engram
