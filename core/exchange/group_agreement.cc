#include "core/exchange/group_agreement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace engram {
namespace {
struct Record {
  int32_t world_rank = -1;
  uint8_t ok = 1;
  uint8_t code = 0;
  char step[26] = {};
};
static_assert(sizeof(Record) == 32);
}  // namespace

Status agree_on_status(Collectives& group, const Status& mine, std::string_view what, int* gone_rank) {
  if (gone_rank != nullptr) *gone_rank = -1;
  Record record;
  record.world_rank = group.world_rank();
  record.ok = mine.is_ok() ? 1 : 0;
  record.code = static_cast<uint8_t>(mine.code());
  const std::string& step = mine.context().step;
  std::memcpy(record.step, step.data(), std::min(step.size(), sizeof(record.step) - 1));
  std::vector<Record> all(static_cast<size_t>(group.size()));
  Status round = group.all_gather(std::as_bytes(std::span<const Record>(&record, 1)),
                                  std::as_writable_bytes(std::span<Record>(all)));
  if (!round.is_ok() && gone_rank != nullptr)
    *gone_rank = round.code() == ErrorCode::kUnavailable && round.context().peer >= 0 ? round.context().peer
                                                                                     : kUnknownMemberGone;
  if (!round.is_ok()) {
    // A member is gone: that is the root cause, even where this rank failed
    // too (perhaps because of it: a survivor cleaned up what it was reading).
    Status gone = std::move(round).with_context(group.world_rank(), -1, std::string(what));
    if (mine.is_ok()) return gone;
    return Status(gone.code(), gone.message() + "; this rank had also failed: " + mine.to_string(), gone.context());
  }
  if (!mine.is_ok()) return Status(mine).with_rank(group.world_rank());
  for (const Record& r : all) {
    if (r.ok) continue;
    return Status(ErrorCode::kUnavailable,
                  fmt::format("{} abandoned: rank {} failed ({}{}{}); this rank undid its part", what, r.world_rank,
                              error_code_name(static_cast<ErrorCode>(r.code)), r.step[0] ? ", step " : "", r.step),
                  {group.world_rank(), r.world_rank, std::string(what)});
  }
  return Status::ok();
}

}  // namespace engram
