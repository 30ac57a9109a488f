// The request slots every request-state hasher keeps (the CPU one,
// core/model/request_hasher.h, and the device one,
// core/lookup/device_request_hasher.h): each slot free, active or waiting
// for the commit of a verify block (and that block's length), and the check
// of every operation's input, with the errors both hashers give
// (invalid_argument naming the operation, the request and the field). A
// check changes nothing; the apply calls after it change only the states,
// so a hasher checks a whole step, then changes its histories and these.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/model/hashing.h"

namespace engram {

inline constexpr int32_t kIdleSlot = -1;
inline constexpr int kMaxRequestSlots = 1 << 20;

// One request's tokens in a batch: tokens[token_begin, token_begin + token_count).
struct RequestRun {
  int32_t slot = kIdleSlot;
  int64_t token_begin = 0;
  int64_t token_count = 0;
};

// After a verify: the anchor (first token of the block) and the first
// accepted_drafts drafts join the slot's history; the rest leave no trace.
struct VerifyCommit {
  int32_t slot = kIdleSlot;
  int64_t accepted_drafts = 0;
};

// Checks a ragged batch against its token array and slot count: every run
// inside the array, runs disjoint, each real slot below slot_count and at
// most once. Names the run and the field.
Status check_request_runs(std::span<const RequestRun> runs, int64_t token_count, int slot_count,
                          std::string_view operation);

class RequestSlots {
 public:
  enum class SlotState : uint8_t { kFree, kActive, kVerifyPending };

  // slot_count 1..kMaxRequestSlots; every slot free.
  static Result<RequestSlots> create(int slot_count);

  int slot_count() const { return static_cast<int>(states_.size()); }
  SlotState state(int slot) const;
  // The verify block waiting for its commit (anchor + drafts), 0 when none.
  int64_t pending_tokens(int slot) const;

  // begin: a free slot, preceding ids in the vocabulary (or DEAD).
  Status check_begin(const TableHasher& hasher, int slot, std::span<const int64_t> preceding_ids) const;
  // release: a slot that is not free.
  Status check_release(int slot) const;
  // extend: row_ids_size = tokens x heads, the runs (check_request_runs),
  // every real slot active, every covered token in the vocabulary.
  Status check_extend(const TableHasher& hasher, std::span<const int64_t> tokens, std::span<const RequestRun> runs,
                      size_t row_ids_size) const;
  // verify: as extend, and no real slot's block empty.
  Status check_verify(const TableHasher& hasher, std::span<const int64_t> tokens, std::span<const RequestRun> runs,
                      size_t row_ids_size) const;
  // commit: each slot once, waiting for commit, accepting 0..drafts of its block.
  Status check_commit(std::span<const VerifyCommit> commits) const;
  // From now on verify refuses blocks of different lengths in one batch,
  // saying `why` (an engine that asserts it: SGLang). Empty: ragged allowed.
  void require_equal_verify_blocks(std::string why) { equal_verify_why_ = std::move(why); }

  // The state changes of a checked operation.
  void begin(int slot);
  void release(int slot);
  void verified(std::span<const RequestRun> runs);
  void committed(std::span<const VerifyCommit> commits);

 private:
  std::string equal_verify_why_;
  Status check_slot_argument(int slot, std::string_view operation) const;
  Status check_batch(const TableHasher& hasher, std::span<const int64_t> tokens, std::span<const RequestRun> runs,
                     size_t row_ids_size, std::string_view operation) const;

  std::vector<SlotState> states_;
  std::vector<int64_t> pending_tokens_;
};

}  // namespace engram
