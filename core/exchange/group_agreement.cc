#include "core/exchange/group_agreement.h"

#include <fmt/format.h>

#include <algorithm>
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

GroupVerdict agree_on_outcome(Collectives& group, const Status& mine, std::string_view what, int progress,
                              std::span<const std::byte> payload) {
  const int me_world = group.world_rank();
  const AgreementRecord record = record_of(mine, me_world, progress);
  const size_t n = static_cast<size_t>(group.size());
  const size_t stride = sizeof(AgreementRecord) + payload.size();
  std::vector<std::byte> send(sizeof record);
  std::memcpy(send.data(), &record, sizeof record);
  send.insert(send.end(), payload.begin(), payload.end());
  std::vector<std::byte> all(stride * n);

  GroupVerdict out;
  Status round = group.all_gather(send, all);
  if (!round.is_ok()) {
    // A member is gone: that is the root cause, even where this rank failed
    // too (perhaps because of it: a survivor cleaned up what it was reading).
    out.gone_rank = round.code() == ErrorCode::kUnavailable && round.context().peer >= 0 ? round.context().peer
                                                                                         : kUnknownMemberGone;
    out.status = std::move(round).with_context(me_world, -1, std::string(what));
    if (!mine.is_ok())
      out.status = Status(out.status.code(), out.status.message() + "; this rank had also failed: " + mine.to_string(),
                          out.status.context());
    return out;
  }
  out.records.resize(n);
  out.payloads.resize(payload.size() * n);
  for (size_t r = 0; r < n; ++r) {
    std::memcpy(&out.records[r], all.data() + r * stride, sizeof(AgreementRecord));
    if (!payload.empty())
      std::memcpy(out.payloads.data() + r * payload.size(), all.data() + r * stride + sizeof(AgreementRecord),
                  payload.size());
  }
  if (!mine.is_ok()) {
    out.status = Status(mine).with_rank(me_world);
    return out;
  }
  const auto failed = std::find_if(out.records.begin(), out.records.end(),
                                   [](const AgreementRecord& r) { return r.ok == 0; });
  if (failed != out.records.end()) {
    out.status = peer_failure(*failed, what, me_world);
    out.peer_failed = true;
  }
  return out;
}

Status agree_on_status(Collectives& group, const Status& mine, std::string_view what, int* gone_rank) {
  GroupVerdict verdict = agree_on_outcome(group, mine, what);
  if (gone_rank != nullptr) *gone_rank = verdict.gone_rank;
  return std::move(verdict.status);
}

}  // namespace engram
