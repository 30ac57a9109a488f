#include "core/exchange/group_agreement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

namespace engram {
namespace {

AgreementRecord record_of(const Status& mine, int world_rank, int progress) {
  AgreementRecord record;
  record.world_rank = world_rank;
  record.ok = mine.is_ok() ? 1 : 0;
  record.code = static_cast<uint8_t>(mine.code());
  record.peer = mine.context().peer;
  record.progress = progress;
  const std::string& step = mine.context().step;
  std::memcpy(record.step, step.data(), std::min(step.size(), sizeof(record.step) - 1));
  return record;
}

// Names the first failed member, as every rank of the group sees it.
Status peer_failure(const AgreementRecord& failed, std::string_view what, int me_world) {
  const std::string step(failed.step, strnlen(failed.step, sizeof(failed.step)));
  return Status(ErrorCode::kUnavailable,
                fmt::format("{} abandoned: rank {} failed{}{} ({}); every rank of the group undid its part", what,
                            failed.world_rank, step.empty() ? "" : " at step " + step,
                            failed.peer >= 0 ? fmt::format(" with peer {}", failed.peer) : "",
                            error_code_name(static_cast<ErrorCode>(failed.code))),
                {me_world, failed.world_rank, step.empty() ? std::string(what) : step});
}

}  // namespace

AgreementRecord GroupVerdict::record(size_t group_rank) const {
  ENGRAM_CHECK(round_ok() && group_rank < member_count());
  AgreementRecord r;
  std::memcpy(&r, gathered->data() + group_rank * stride_bytes, sizeof r);
  return r;
}

std::span<const std::byte> GroupVerdict::payload(size_t group_rank) const {
  ENGRAM_CHECK(round_ok() && group_rank < member_count());
  return std::span<const std::byte>(*gathered).subspan(group_rank * stride_bytes + sizeof(AgreementRecord),
                                                       stride_bytes - sizeof(AgreementRecord));
}

GroupVerdict agree_on_outcome(Collectives& group, const Status& mine, std::string_view what, int progress,
                              std::span<const std::byte> payload) {
  const int me_world = group.world_rank();
  const AgreementRecord record = record_of(mine, me_world, progress);
  const size_t n = static_cast<size_t>(group.size());
  const size_t stride = sizeof(AgreementRecord) + payload.size();
  std::vector<std::byte> send(stride);
  std::memcpy(send.data(), &record, sizeof record);
  if (!payload.empty()) std::memcpy(send.data() + sizeof record, payload.data(), payload.size());

  GroupVerdict out;
  auto round = group.all_gather_shared(send);
  if (!round.is_ok()) {
    // A member is gone: that is the root cause, even where this rank failed
    // too (perhaps because of it: a survivor cleaned up what it was reading).
    Status why = std::move(round).take_status();
    out.gone_rank = why.code() == ErrorCode::kUnavailable && why.context().peer >= 0 ? why.context().peer
                                                                                     : kUnknownMemberGone;
    out.status = std::move(why).with_context(me_world, -1, what);
    if (!mine.is_ok())
      out.status = Status(out.status.code(), out.status.message() + "; this rank had also failed: " + mine.to_string(),
                          out.status.context());
    return out;
  }
  // The bytes alone, held with the buffer they sit in (an aliasing pointer).
  std::shared_ptr<const GatheredBytes> gathered = std::move(round).value();
  out.gathered = std::shared_ptr<const std::vector<std::byte>>(gathered, &gathered->bytes);
  out.stride_bytes = stride;
  ENGRAM_CHECK(out.gathered != nullptr && out.gathered->size() == stride * n);
  if (!mine.is_ok()) {
    out.status = Status(mine).with_rank(me_world);
    return out;
  }
  for (size_t r = 0; r < n; ++r) {
    // `ok` sits at a fixed offset of each record: read it in place.
    uint8_t ok = 1;
    std::memcpy(&ok, out.gathered->data() + r * stride + offsetof(AgreementRecord, ok), 1);
    if (ok == 0) {
      out.status = peer_failure(out.record(r), what, me_world);
      out.peer_failed = true;
      break;
    }
  }
  return out;
}

Status agree_on_status(Collectives& group, const Status& mine, std::string_view what, int* gone_rank) {
  GroupVerdict verdict = agree_on_outcome(group, mine, what);
  if (gone_rank != nullptr) *gone_rank = verdict.gone_rank;
  return std::move(verdict.status);
}

}  // namespace engram
