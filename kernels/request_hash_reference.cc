#include "kernels/request_hash_reference.h"

#include <algorithm>
#include <vector>

#include "core/base/check.h"

namespace engram::kernels {
namespace {

void note(uint64_t* error, DeviceHashErrorCode code, uint64_t index) {
  *error = std::min(*error, device_hash_error(code, index));
}

bool run_alone_good(const DeviceRunWords& r, int slot_count, int64_t token_count) {
  return r.slot >= 0 && r.slot < slot_count && r.token_count >= 1 && r.token_begin >= 0 &&
         r.token_begin <= token_count && r.token_count <= token_count - r.token_begin;
}

}  // namespace

void request_hash_reference(const TableHasher& h, bool verify, std::span<const int64_t> tokens,
                            const int64_t (&header)[2], std::span<const DeviceRunWords> runs, RequestStateHost s,
                            std::span<int64_t> row_ids) {
  const size_t heads = static_cast<size_t>(h.head_count());
  const size_t length = static_cast<size_t>(h.history_length());
  const size_t buffer_words = static_cast<size_t>(s.slot_count) * length;
  const auto token_count = static_cast<int64_t>(tokens.size());
  ENGRAM_CHECK(s.error != nullptr && static_cast<int>(runs.size()) == s.slot_count);
  ENGRAM_CHECK(row_ids.size() == tokens.size() * heads && s.histories.size() == 2 * buffer_words);
  std::fill(row_ids.begin(), row_ids.end(), kDeadId);
  const size_t read = header[1] != 0 ? 1 : 0;
  const std::span<const int64_t> old_histories = std::span<const int64_t>(s.histories).subspan(read * buffer_words, buffer_words);
  const std::span<int64_t> new_histories = s.histories.subspan((1 - read) * buffer_words, buffer_words);

  int64_t run_count = header[0];
  if (run_count < 0 || run_count > s.slot_count) {
    note(s.error, DeviceHashErrorCode::kRunCount, 0);
    run_count = 0;
  }
  const auto step_runs = runs.first(static_cast<size_t>(run_count));
  // Sorted and disjoint: after the run before it, when that one is good by itself (else it is flagged).
  std::vector<uint8_t> good(step_runs.size());
  bool all_good = run_count == header[0];
  for (size_t j = 0; j < step_runs.size(); ++j) {
    const DeviceRunWords& r = step_runs[j];
    const DeviceRunWords* before = j > 0 ? &step_runs[j - 1] : nullptr;
    good[j] = run_alone_good(r, s.slot_count, token_count) &&
              (before == nullptr || !run_alone_good(*before, s.slot_count, token_count) ||
               r.token_begin >= before->token_begin + before->token_count);
    if (!good[j]) note(s.error, DeviceHashErrorCode::kRun, j);
    if (verify && r.token_count > s.verify_tokens_max) note(s.error, DeviceHashErrorCode::kVerifyBlock, j);
    all_good &= good[j] != 0;
  }
  // A token outside the vocabulary is taken as DEAD.
  std::vector<int64_t> taken(tokens.begin(), tokens.end());
  for (int64_t& v : taken)
    if (!h.token_in_vocabulary(v)) v = kDeadId;
  for (size_t j = 0; j < step_runs.size(); ++j)
    if (good[j] != 0)
      for (int64_t t = step_runs[j].token_begin; t < step_runs[j].token_begin + step_runs[j].token_count; ++t)
        if (!h.token_in_vocabulary(tokens[static_cast<size_t>(t)])) note(s.error, DeviceHashErrorCode::kToken, static_cast<uint64_t>(t));

  std::vector<int64_t> history(length);
  std::vector<uint8_t> advanced(static_cast<size_t>(s.slot_count), 0);
  for (size_t j = 0; j < step_runs.size(); ++j) {
    if (good[j] == 0) continue;
    const DeviceRunWords& r = step_runs[j];
    const auto slot = static_cast<size_t>(r.slot);
    const auto begin = static_cast<size_t>(r.token_begin), count = static_cast<size_t>(r.token_count);
    const std::span<const int64_t> run_tokens = std::span<const int64_t>(taken).subspan(begin, count);
    std::copy_n(old_histories.begin() + static_cast<std::ptrdiff_t>(slot * length), length, history.begin());
    std::vector<int64_t> ids(count * heads);
    h.hash_run(history, run_tokens, ids);  // leaves the history after the run
    if (all_good) {
      // With every run good the ids are exact; a bad token's own are DEAD.
      for (size_t k = 0; k < count; ++k)
        if (!h.token_in_vocabulary(tokens[begin + k])) std::fill_n(ids.begin() + static_cast<std::ptrdiff_t>(k * heads), heads, kDeadId);
      std::copy(ids.begin(), ids.end(), row_ids.begin() + static_cast<std::ptrdiff_t>(begin * heads));
    }
    if (!verify) {
      std::copy(history.begin(), history.end(), new_histories.begin() + static_cast<std::ptrdiff_t>(slot * length));
      advanced[slot] = 1;
    } else if (r.token_count <= s.verify_tokens_max) {
      std::copy(run_tokens.begin(), run_tokens.end(),
                s.pending.begin() + static_cast<std::ptrdiff_t>(slot * static_cast<size_t>(s.verify_tokens_max)));
      s.pending_counts[slot] = r.token_count;
    }
  }
  if (!verify)
    for (size_t slot = 0; slot < advanced.size(); ++slot)
      if (advanced[slot] == 0)
        std::copy_n(old_histories.begin() + static_cast<std::ptrdiff_t>(slot * length), length,
                    new_histories.begin() + static_cast<std::ptrdiff_t>(slot * length));
}

void request_commit_reference(const TableHasher& h, const int64_t (&header)[2],
                              std::span<const DeviceCommitWords> commits, RequestStateHost s) {
  const size_t length = static_cast<size_t>(h.history_length());
  const size_t buffer_words = static_cast<size_t>(s.slot_count) * length;
  ENGRAM_CHECK(s.error != nullptr && static_cast<int>(commits.size()) == s.slot_count);
  ENGRAM_CHECK(s.histories.size() == 2 * buffer_words);
  const std::span<int64_t> histories = s.histories.subspan(header[1] != 0 ? buffer_words : 0, buffer_words);
  const int64_t commit_count = header[0];
  if (commit_count < 0 || commit_count > s.slot_count) {
    note(s.error, DeviceHashErrorCode::kCommitCount, 0);
    return;
  }
  const auto step = commits.first(static_cast<size_t>(commit_count));
  bool bad = false;
  for (size_t j = 0; j < step.size(); ++j) {
    const DeviceCommitWords& c = step[j];
    const bool slot_ok = c.slot >= 0 && c.slot < s.slot_count;
    const int64_t held = slot_ok ? s.pending_counts[static_cast<size_t>(c.slot)] : 0;
    if (!slot_ok || held < 1 || held > s.verify_tokens_max || c.accepted_drafts < 0 || c.accepted_drafts > held - 1) {
      note(s.error, DeviceHashErrorCode::kCommit, j);
      bad = true;
    }
  }
  if (bad) return;
  for (const DeviceCommitWords& c : step) {
    const auto slot = static_cast<size_t>(c.slot);
    const auto block = std::span<const int64_t>(s.pending).subspan(slot * static_cast<size_t>(s.verify_tokens_max),
                                                                   static_cast<size_t>(c.accepted_drafts) + 1);
    h.advance(histories.subspan(slot * length, length), block);
    s.pending_counts[slot] = 0;
  }
}

}  // namespace engram::kernels
