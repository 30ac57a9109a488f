#include "core/model/request_slots.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/text_list.h"

namespace engram {
namespace {

const char* state_name(RequestSlots::SlotState state) {
  switch (state) {
    case RequestSlots::SlotState::kFree: return "free";
    case RequestSlots::SlotState::kActive: return "active";
    case RequestSlots::SlotState::kVerifyPending: return "waiting for commit after verify";
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
          "{}: request {} (slot {}): runs[{}] covers tokens {} but the batch holds {} tokens; token_begin and "
          "token_count must stay inside the token array",
          operation, i, r.slot, i, half_open_range_text(r.token_begin, r.token_count), token_count));
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
          "{}: request {} (tokens {}) overlaps request {} (tokens {}); runs must not share tokens", operation,
          order[k], half_open_range_text(next.token_begin, next.token_count), order[k - 1],
          half_open_range_text(prev.token_begin, prev.token_count)));
  }
  return Status::ok();
}

Result<RequestSlots> RequestSlots::create(int slot_count) {
  if (slot_count < 1 || slot_count > kMaxRequestSlots)
    return invalid_argument(fmt::format("request hasher: slot_count is {}; it must be 1..{}", slot_count,
                                        kMaxRequestSlots));
  RequestSlots s;
  s.states_.assign(static_cast<size_t>(slot_count), SlotState::kFree);
  s.pending_tokens_.assign(static_cast<size_t>(slot_count), 0);
  return s;
}

RequestSlots::SlotState RequestSlots::state(int slot) const {
  ENGRAM_CHECK(slot >= 0 && slot < slot_count());
  return states_[static_cast<size_t>(slot)];
}

int64_t RequestSlots::pending_tokens(int slot) const {
  ENGRAM_CHECK(slot >= 0 && slot < slot_count());
  return pending_tokens_[static_cast<size_t>(slot)];
}

Status RequestSlots::check_slot_argument(int slot, std::string_view operation) const {
  if (slot < 0 || slot >= slot_count())
    return invalid_argument(fmt::format("{}: slot is {}; slots are 0..{} (the hasher was made with {} slots)",
                                        operation, slot, slot_count() - 1, slot_count()));
  return Status::ok();
}

Status RequestSlots::check_begin(const TableHasher& hasher, int slot, std::span<const int64_t> preceding_ids) const {
  ENGRAM_RETURN_IF_ERROR(check_slot_argument(slot, "begin"));
  if (state(slot) != SlotState::kFree)
    return invalid_argument(fmt::format("begin: slot {} is {}; release it before a new request takes it", slot,
                                        state_name(state(slot))));
  for (size_t i = 0; i < preceding_ids.size(); ++i)
    if (!hasher.token_in_vocabulary(preceding_ids[i]))
      return hasher.check_token(preceding_ids[i], fmt::format("begin (slot {}): preceding_ids[{}]", slot, i));
  return Status::ok();
}

Status RequestSlots::check_release(int slot) const {
  ENGRAM_RETURN_IF_ERROR(check_slot_argument(slot, "release"));
  if (state(slot) == SlotState::kFree)
    return invalid_argument(fmt::format("release: slot {} is already free; release each request once", slot));
  return Status::ok();
}

Status RequestSlots::check_batch(const TableHasher& hasher, std::span<const int64_t> tokens,
                                 std::span<const RequestRun> runs, size_t row_ids_size,
                                 std::string_view operation) const {
  const size_t heads = static_cast<size_t>(hasher.head_count());
  if (row_ids_size != tokens.size() * heads)
    return invalid_argument(fmt::format("{}: row_ids holds {} ids; {} tokens x {} heads need {}", operation,
                                        row_ids_size, tokens.size(), heads, tokens.size() * heads));
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
    // The message is formatted only for a bad token (a batch of 8,192
    // tokens would otherwise build 8,192 strings).
    for (int64_t t = r.token_begin; t < r.token_begin + r.token_count; ++t)
      if (!hasher.token_in_vocabulary(tokens[static_cast<size_t>(t)]))
        return hasher.check_token(tokens[static_cast<size_t>(t)],
                                  fmt::format("{}: request {} (slot {}): tokens[{}]", operation, i, r.slot, t));
  }
  return Status::ok();
}

Status RequestSlots::check_extend(const TableHasher& hasher, std::span<const int64_t> tokens,
                                  std::span<const RequestRun> runs, size_t row_ids_size) const {
  return check_batch(hasher, tokens, runs, row_ids_size, "extend");
}

Status RequestSlots::check_verify(const TableHasher& hasher, std::span<const int64_t> tokens,
                                  std::span<const RequestRun> runs, size_t row_ids_size) const {
  ENGRAM_RETURN_IF_ERROR(check_batch(hasher, tokens, runs, row_ids_size, "verify"));
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i].slot != kIdleSlot && runs[i].token_count == 0)
      return invalid_argument(fmt::format(
          "verify: request {} (slot {}): runs[{}].token_count is 0; a verify block holds the anchor and its drafts",
          i, runs[i].slot, i));
  if (!equal_verify_why_.empty()) {
    const RequestRun* first = nullptr;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].slot == kIdleSlot) continue;
      if (first == nullptr) first = &runs[i];
      else if (runs[i].token_count != first->token_count)
        return invalid_argument(fmt::format(
            "verify: request {} (slot {}): runs[{}].token_count is {}, the batch's first request's is {}; {}", i,
            runs[i].slot, i, runs[i].token_count, first->token_count, equal_verify_why_));
    }
  }
  return Status::ok();
}

Status RequestSlots::check_commit(std::span<const VerifyCommit> commits) const {
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
    const int64_t drafts = pending_tokens(c.slot) - 1;
    if (c.accepted_drafts < 0 || c.accepted_drafts > drafts)
      return invalid_argument(fmt::format(
          "commit: request {} (slot {}): commits[{}].accepted_drafts is {} but its verify block held {} drafts; "
          "accept 0..{}",
          i, c.slot, i, c.accepted_drafts, drafts, drafts));
  }
  return Status::ok();
}

void RequestSlots::begin(int slot) {
  ENGRAM_CHECK(state(slot) == SlotState::kFree);
  states_[static_cast<size_t>(slot)] = SlotState::kActive;
}

void RequestSlots::release(int slot) {
  ENGRAM_CHECK(state(slot) != SlotState::kFree);
  states_[static_cast<size_t>(slot)] = SlotState::kFree;
  pending_tokens_[static_cast<size_t>(slot)] = 0;
}

void RequestSlots::verified(std::span<const RequestRun> runs) {
  for (const RequestRun& r : runs) {
    if (r.slot == kIdleSlot) continue;
    ENGRAM_CHECK(state(r.slot) == SlotState::kActive && r.token_count > 0);
    states_[static_cast<size_t>(r.slot)] = SlotState::kVerifyPending;
    pending_tokens_[static_cast<size_t>(r.slot)] = r.token_count;
  }
}

void RequestSlots::committed(std::span<const VerifyCommit> commits) {
  for (const VerifyCommit& c : commits) {
    ENGRAM_CHECK(state(c.slot) == SlotState::kVerifyPending);
    states_[static_cast<size_t>(c.slot)] = SlotState::kActive;
    pending_tokens_[static_cast<size_t>(c.slot)] = 0;
  }
}

}  // namespace engram
