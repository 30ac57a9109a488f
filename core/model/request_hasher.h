// Hash ids step by step, as engines compute them (docs/design.md section 10):
// per request slot the history an n-gram reads across steps (the last
// max order - 1 ids), and the operations engines perform on a batch of
// requests. Whatever way a sequence is cut (prefill chunks, decode tokens,
// a cached prefix, lookback ids from another instance, verify blocks with
// rejected drafts), the ids equal those of TableHasher::hash over the
// accepted sequence whole: tests/request_hasher_test.cc holds that over
// random schedules.
//
// A batch is ragged, as engines send it: one token array, and per request a
// run (slot, first token, token count). Tokens no run covers are padding;
// a run of slot kIdleSlot is an idle DP slot. Both hash to DEAD for every
// head (never row 0) and change no history, so a fully padded step changes
// nothing.
//
// Every operation checks its whole input before it changes anything: a
// refused step (invalid_argument naming the request and the field) leaves
// every history as it was. The slot states and those checks are
// core/model/request_slots.h, which the device hasher
// (core/lookup/device_request_hasher.h) keeps too.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/model/hashing.h"
#include "core/model/request_slots.h"

namespace engram {

class RequestHasher {
 public:
  using SlotState = RequestSlots::SlotState;

  static Result<RequestHasher> create(TableHasher table_hasher, int slot_count);

  const TableHasher& table_hasher() const { return hasher_; }
  int slot_count() const { return slots_.slot_count(); }
  SlotState state(int slot) const { return slots_.state(slot); }
  // The slot's history, newest first (history_length() ids).
  std::span<const int64_t> history(int slot) const;

  // A new request on a free slot. preceding_ids: the compressed ids before
  // its first new token, oldest first: empty for a fresh sequence, a cached
  // prefix (any length; only its tail matters), or the lookback ids another
  // instance handed over (prefill/decode disaggregation).
  Status begin(int slot, std::span<const int64_t> preceding_ids = {});
  // Hashes each run's tokens after its slot's history (a prefill chunk, a
  // decode token) and appends them to it. row_ids: tokens.size() x heads.
  Status extend(std::span<const int64_t> tokens, std::span<const RequestRun> runs, std::span<int64_t> row_ids);
  // Hashes each run as a verify block (anchor, then drafts) after its slot's
  // history, history unchanged; the block waits for commit(). Blocks may
  // differ in length (ragged verify) unless require_equal_verify_blocks.
  Status verify(std::span<const int64_t> tokens, std::span<const RequestRun> runs, std::span<int64_t> row_ids);
  // Appends the anchor and the accepted drafts of each slot's pending block.
  Status commit(std::span<const VerifyCommit> commits);
  // The slot is free again; a pending block is dropped.
  Status release(int slot);

  // The slot's verify block waiting for its commit (anchor, then drafts).
  std::span<const int64_t> pending_block(int slot) const;
  // verify refuses ragged blocks from now on, saying `why` (an engine's rule:
  // core/engines apply_engine_hash_rules).
  void require_equal_verify_blocks(std::string why) { slots_.require_equal_verify_blocks(std::move(why)); }

 private:
  RequestHasher(TableHasher table_hasher, RequestSlots slots)
      : hasher_(std::move(table_hasher)), slots_(std::move(slots)) {}
  void hash_batch(std::span<const int64_t> tokens, std::span<const RequestRun> runs, std::span<int64_t> row_ids,
                  bool keep_history);

  TableHasher hasher_;
  RequestSlots slots_;                             // states, and the checks every operation makes first
  std::vector<int64_t> histories_;                 // slot_count x history_length, newest first
  std::vector<std::vector<int64_t>> pending_;      // per slot: its verify block
};

}  // namespace engram
