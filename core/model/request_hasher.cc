#include "core/model/request_hasher.h"

#include <fmt/format.h>

#include <algorithm>

namespace engram {
namespace {

const char* state_name(RequestHasher::SlotState state) {
  switch (state) {
    case RequestHasher::SlotState::kFree: return "free";
    case RequestHasher::SlotState::kActive: return "active";
    case RequestHasher::SlotState::kVerifyPending: return "waiting for commit after verify";
  }
  return "?";
}

}  // namespace

Status check_request_runs(std::span<const RequestRun> runs, int64_t token_count, int slot_count,
                          std::string_view operation) {
  ENGRAM_CHECK(token_count >= 0 && slot_count >= 0);
  std::vector<int64_t> order;
  std::vector<uint8_t> slot_seen(static_cast<size_t>(slot_count), 0);
  for (size_t i = 0; i < runs.size(); ++i) {
    const RequestRun& r = runs[i];
    if (r.slot != kIdleSlot && (r.slot < 0 || r.slot >= slot_count))
      return invalid_argument(fmt::format(
          "{}: request {}: runs[{}].slot is {}; slots are 0..{} (the hasher was made with {} slots), or {} for an idle slot",
          operation, i, i, r.slot, slot_count - 1, slot_count, kIdleSlot));
    if (r.token_begin < 0 || r.token_count < 0 || r.token_begin > token_count ||
        r.token_count > token_count - r.token_begin)
      return invalid_argument(fmt::format(
          "{}: request {} (slot {}): runs[{}] covers tokens [{}, {}) but the batch holds {} tokens; token_begin and "
          "token_count must stay inside the token array",
          operation, i, r.slot, i, r.token_begin, r.token_begin + r.token_count, token_count));
    if (r.slot != kIdleSlot) {
      if (slot_seen[static_cast<size_t>(r.slot)] != 0)
        return invalid_argument(fmt::format(
            "{}: request {}: runs[{}].slot {} appears twice in one batch; give each request one run per step",
            operation, i, i, r.slot));
      slot_seen[static_cast<size_t>(r.slot)] = 1;
    }
    order.push_back(static_cast<int64_t>(i));
  }
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return runs[static_cast<size_t>(a)].token_begin < runs[static_cast<size_t>(b)].token_begin;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const RequestRun& prev = runs[static_cast<size_t>(order[k - 1])];
    const RequestRun& next = runs[static_cast<size_t>(order[k])];
    if (prev.token_count > 0 && next.token_count > 0 && next.token_begin < prev.token_begin + prev.token_count)
      return invalid_argument(fmt::format(
          "{}: request {} (tokens [{}, {})) overlaps request {} (tokens [{}, {})); runs must not share tokens",
          operation, order[k], next.token_begin, next.token_begin + next.token_count, order[k - 1],
          prev.token_begin, prev.token_begin + prev.token_count));
  }
  return Status::ok();
}

Result<RequestHasher> RequestHasher::create(TableHasher table_hasher, int slot_count) {
  if (slot_count < 1 || slot_count > kMaxRequestSlots)
    return invalid_argument(fmt::format("request hasher: slot_count is {}; it must be 1..{}", slot_count,
                                        kMaxRequestSlots));
  RequestHasher h(std::move(table_hasher));
  const size_t length = static_cast<size_t>(h.hasher_.history_length());
  h.states_.assign(static_cast<size_t>(slot_count), SlotState::kFree);
  h.histories_.assign(static_cast<size_t>(slot_count) * length, h.hasher_.pad_id());
  h.pending_.resize(static_cast<size_t>(slot_count));
  return h;
}

RequestHasher::SlotState RequestHasher::state(int slot) const {
  ENGRAM_CHECK(slot >= 0 && slot < slot_count());
  return states_[static_cast<size_t>(slot)];
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

Status RequestHasher::check_slot_argument(int slot, std::string_view operation) const {
  if (slot < 0 || slot >= slot_count())
    return invalid_argument(fmt::format("{}: slot is {}; slots are 0..{} (the hasher was made with {} slots)",
                                        operation, slot, slot_count() - 1, slot_count()));
  return Status::ok();
}

Status RequestHasher::begin(int slot, std::span<const int64_t> preceding_ids) {
  ENGRAM_RETURN_IF_ERROR(check_slot_argument(slot, "begin"));
  if (state(slot) != SlotState::kFree)
    return invalid_argument(fmt::format("begin: slot {} is {}; release it before a new request takes it", slot,
                                        state_name(state(slot))));
  for (size_t i = 0; i < preceding_ids.size(); ++i)
    if (!hasher_.token_in_vocabulary(preceding_ids[i]))
      return hasher_.check_token(preceding_ids[i], fmt::format("begin (slot {}): preceding_ids[{}]", slot, i));
  const size_t length = static_cast<size_t>(hasher_.history_length());
  std::span<int64_t> h = std::span<int64_t>(histories_).subspan(static_cast<size_t>(slot) * length, length);
  std::fill(h.begin(), h.end(), hasher_.pad_id());
  hasher_.advance(h, preceding_ids);
  states_[static_cast<size_t>(slot)] = SlotState::kActive;
  return Status::ok();
}

Status RequestHasher::release(int slot) {
  ENGRAM_RETURN_IF_ERROR(check_slot_argument(slot, "release"));
  if (state(slot) == SlotState::kFree)
    return invalid_argument(fmt::format("release: slot {} is already free; release each request once", slot));
  states_[static_cast<size_t>(slot)] = SlotState::kFree;
  pending_[static_cast<size_t>(slot)].clear();
  return Status::ok();
}

Status RequestHasher::check_batch(std::span<const int64_t> tokens, std::span<const RequestRun> runs,
                                  std::span<int64_t> row_ids, std::string_view operation) const {
  const size_t heads = static_cast<size_t>(hasher_.head_count());
  if (row_ids.size() != tokens.size() * heads)
    return invalid_argument(fmt::format("{}: row_ids holds {} ids; {} tokens x {} heads need {}", operation,
                                        row_ids.size(), tokens.size(), heads, tokens.size() * heads));
  ENGRAM_RETURN_IF_ERROR(
      check_request_runs(runs, static_cast<int64_t>(tokens.size()), slot_count(), operation));
  for (size_t i = 0; i < runs.size(); ++i) {
    const RequestRun& r = runs[i];
    if (r.slot == kIdleSlot) continue;
    const SlotState s = state(r.slot);
    if (s != SlotState::kActive)
      return invalid_argument(fmt::format(
          "{}: request {}: runs[{}].slot {} is {}; {}", operation, i, i, r.slot, state_name(s),
          s == SlotState::kFree ? "begin a request on it first (a slot is not used after release)"
                                : "commit its verify block first"));
    for (int64_t t = r.token_begin; t < r.token_begin + r.token_count; ++t)
      if (!hasher_.token_in_vocabulary(tokens[static_cast<size_t>(t)]))
        return hasher_.check_token(tokens[static_cast<size_t>(t)],
                                   fmt::format("{}: request {} (slot {}): tokens[{}]", operation, i, r.slot, t));
  }
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
  ENGRAM_RETURN_IF_ERROR(check_batch(tokens, runs, row_ids, "extend"));
  hash_batch(tokens, runs, row_ids, /*keep_history=*/false);
  return Status::ok();
}

Status RequestHasher::verify(std::span<const int64_t> tokens, std::span<const RequestRun> runs,
                             std::span<int64_t> row_ids) {
  ENGRAM_RETURN_IF_ERROR(check_batch(tokens, runs, row_ids, "verify"));
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i].slot != kIdleSlot && runs[i].token_count == 0)
      return invalid_argument(fmt::format(
          "verify: request {} (slot {}): runs[{}].token_count is 0; a verify block holds the anchor and its drafts",
          i, runs[i].slot, i));
  hash_batch(tokens, runs, row_ids, /*keep_history=*/true);
  for (const RequestRun& r : runs) {
    if (r.slot == kIdleSlot) continue;
    const auto begin = tokens.begin() + r.token_begin;
    pending_[static_cast<size_t>(r.slot)].assign(begin, begin + r.token_count);
    states_[static_cast<size_t>(r.slot)] = SlotState::kVerifyPending;
  }
  return Status::ok();
}

Status RequestHasher::commit(std::span<const VerifyCommit> commits) {
  std::vector<uint8_t> seen(states_.size(), 0);
  for (size_t i = 0; i < commits.size(); ++i) {
    const VerifyCommit& c = commits[i];
    if (c.slot < 0 || c.slot >= slot_count())
      return invalid_argument(fmt::format("commit: request {}: commits[{}].slot is {}; slots are 0..{}", i, i, c.slot,
                                          slot_count() - 1));
    if (seen[static_cast<size_t>(c.slot)] != 0)
      return invalid_argument(
          fmt::format("commit: request {}: commits[{}].slot {} is committed twice in one call", i, i, c.slot));
    seen[static_cast<size_t>(c.slot)] = 1;
    if (state(c.slot) != SlotState::kVerifyPending)
      return invalid_argument(fmt::format("commit: request {}: commits[{}].slot {} is {}; verify a block on it first",
                                          i, i, c.slot, state_name(state(c.slot))));
    const int64_t drafts = static_cast<int64_t>(pending_[static_cast<size_t>(c.slot)].size()) - 1;
    if (c.accepted_drafts < 0 || c.accepted_drafts > drafts)
      return invalid_argument(fmt::format(
          "commit: request {} (slot {}): commits[{}].accepted_drafts is {} but its verify block held {} drafts; "
          "accept 0..{}",
          i, c.slot, i, c.accepted_drafts, drafts, drafts));
  }
  const size_t length = static_cast<size_t>(hasher_.history_length());
  for (const VerifyCommit& c : commits) {
    std::vector<int64_t>& block = pending_[static_cast<size_t>(c.slot)];
    std::span<int64_t> h = std::span<int64_t>(histories_).subspan(static_cast<size_t>(c.slot) * length, length);
    hasher_.advance(h, std::span<const int64_t>(block).first(static_cast<size_t>(c.accepted_drafts) + 1));
    block.clear();
    states_[static_cast<size_t>(c.slot)] = SlotState::kActive;
  }
  return Status::ok();
}

}  // namespace engram
