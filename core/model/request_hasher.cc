#include "core/model/request_hasher.h"

#include <algorithm>

namespace engram {

Result<RequestHasher> RequestHasher::create(TableHasher table_hasher, int slot_count) {
  ENGRAM_ASSIGN_OR_RETURN(RequestSlots slots, RequestSlots::create(slot_count));
  RequestHasher h(std::move(table_hasher), std::move(slots));
  const size_t length = static_cast<size_t>(h.hasher_.history_length());
  h.histories_.assign(static_cast<size_t>(slot_count) * length, h.hasher_.pad_id());
  h.pending_.resize(static_cast<size_t>(slot_count));
  return h;
}

std::span<const int64_t> RequestHasher::history(int slot) const {
  ENGRAM_CHECK(slot >= 0 && slot < slot_count());
  const size_t length = static_cast<size_t>(hasher_.history_length());
  return std::span<const int64_t>(histories_).subspan(static_cast<size_t>(slot) * length, length);
}

std::span<const int64_t> RequestHasher::pending_block(int slot) const {
  ENGRAM_CHECK(slot >= 0 && slot < slot_count());
  return pending_[static_cast<size_t>(slot)];
}

Status RequestHasher::begin(int slot, std::span<const int64_t> preceding_ids) {
  ENGRAM_RETURN_IF_ERROR(slots_.check_begin(hasher_, slot, preceding_ids));
  const size_t length = static_cast<size_t>(hasher_.history_length());
  std::span<int64_t> h = std::span<int64_t>(histories_).subspan(static_cast<size_t>(slot) * length, length);
  std::fill(h.begin(), h.end(), hasher_.pad_id());
  hasher_.advance(h, preceding_ids);
  slots_.begin(slot);
  return Status::ok();
}

Status RequestHasher::release(int slot) {
  ENGRAM_RETURN_IF_ERROR(slots_.check_release(slot));
  slots_.release(slot);
  pending_[static_cast<size_t>(slot)].clear();
  return Status::ok();
}

void RequestHasher::hash_batch(std::span<const int64_t> tokens, std::span<const RequestRun> runs,
                               std::span<int64_t> row_ids, bool keep_history) {
  const size_t heads = static_cast<size_t>(hasher_.head_count());
  const size_t length = static_cast<size_t>(hasher_.history_length());
  // Padding and idle slots: DEAD for every head.
  std::fill(row_ids.begin(), row_ids.end(), kDeadId);
  std::vector<int64_t> scratch(length);
  for (const RequestRun& r : runs) {
    if (r.slot == kIdleSlot || r.token_count == 0) continue;
    std::span<int64_t> h = std::span<int64_t>(histories_).subspan(static_cast<size_t>(r.slot) * length, length);
    std::span<int64_t> run_history = h;
    if (keep_history) {
      std::copy(h.begin(), h.end(), scratch.begin());
      run_history = scratch;
    }
    const auto begin = static_cast<size_t>(r.token_begin);
    const auto count = static_cast<size_t>(r.token_count);
    hasher_.hash_run(run_history, tokens.subspan(begin, count), row_ids.subspan(begin * heads, count * heads));
  }
}

Status RequestHasher::extend(std::span<const int64_t> tokens, std::span<const RequestRun> runs,
                             std::span<int64_t> row_ids) {
  ENGRAM_RETURN_IF_ERROR(slots_.check_extend(hasher_, tokens, runs, row_ids.size()));
  hash_batch(tokens, runs, row_ids, /*keep_history=*/false);
  return Status::ok();
}

Status RequestHasher::verify(std::span<const int64_t> tokens, std::span<const RequestRun> runs,
                             std::span<int64_t> row_ids) {
  ENGRAM_RETURN_IF_ERROR(slots_.check_verify(hasher_, tokens, runs, row_ids.size()));
  hash_batch(tokens, runs, row_ids, /*keep_history=*/true);
  for (const RequestRun& r : runs) {
    if (r.slot == kIdleSlot) continue;
    const auto begin = tokens.begin() + r.token_begin;
    pending_[static_cast<size_t>(r.slot)].assign(begin, begin + r.token_count);
  }
  slots_.verified(runs);
  return Status::ok();
}

Status RequestHasher::commit(std::span<const VerifyCommit> commits) {
  ENGRAM_RETURN_IF_ERROR(slots_.check_commit(commits));
  const size_t length = static_cast<size_t>(hasher_.history_length());
  for (const VerifyCommit& c : commits) {
    std::vector<int64_t>& block = pending_[static_cast<size_t>(c.slot)];
    std::span<int64_t> h = std::span<int64_t>(histories_).subspan(static_cast<size_t>(c.slot) * length, length);
    hasher_.advance(h, std::span<const int64_t>(block).first(static_cast<size_t>(c.accepted_drafts) + 1));
    block.clear();
  }
  slots_.committed(commits);
  return Status::ok();
}

}  // namespace engram
