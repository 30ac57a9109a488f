#include "kernels/request_hash_reference.h"

#include <algorithm>
#include <vector>

#include "core/base/check.h"

namespace engram::kernels {
namespace {

void note(uint64_t* error, DeviceHashErrorCode code, uint64_t index) {
  *error = std::min(*error, device_hash_error(code, index));
}

// Whether token t of a run starting at `begin` reads a token outside the
// vocabulary: walking back from t (t included), under a barrier rule up to
// the first DEAD (it and everything older read pad).
bool lookback_reads_bad(const TableHasher& h, std::span<const int64_t> tokens, int64_t begin, int64_t t) {
  const bool barrier = h.dead_token_rule() != DeadTokenRule::kLiteral;
  for (int k = 0; k < h.max_order() && t - k >= begin; ++k) {
    const int64_t v = tokens[static_cast<size_t>(t - k)];
    if (barrier && v == kDeadId) return false;
    if (!h.token_in_vocabulary(v)) return true;
  }
  return false;
}

}  // namespace

void request_hash_reference(const TableHasher& h, bool verify, std::span<const int64_t> tokens, int64_t run_count,
                            std::span<const DeviceRunWords> runs, RequestStateHost s, std::span<int64_t> row_ids) {
  const size_t heads = static_cast<size_t>(h.head_count());
  const size_t length = static_cast<size_t>(h.history_length());
  const auto token_count = static_cast<int64_t>(tokens.size());
  ENGRAM_CHECK(s.error != nullptr && static_cast<int>(runs.size()) == s.slot_count);
  ENGRAM_CHECK(row_ids.size() == tokens.size() * heads);
  std::fill(row_ids.begin(), row_ids.end(), kDeadId);

  // The whole input first.
  if (run_count < 0 || run_count > s.slot_count) {
    note(s.error, DeviceHashErrorCode::kRunCount, 0);
    return;
  }
  const auto step_runs = runs.first(static_cast<size_t>(run_count));
  auto good_alone = [&](const DeviceRunWords& r) {
    return r.slot >= 0 && r.slot < s.slot_count && r.token_count >= 1 && r.token_begin >= 0 &&
           r.token_begin <= token_count && r.token_count <= token_count - r.token_begin;
  };
  bool runs_ok = true;
  for (size_t j = 0; j < step_runs.size(); ++j) {
    const DeviceRunWords& r = step_runs[j];
    // Sorted and disjoint: after the run before it, when that one is good by itself (else it is flagged).
    const DeviceRunWords* before = j > 0 ? &step_runs[j - 1] : nullptr;
    const bool bad = !good_alone(r) || (before != nullptr && good_alone(*before) &&
                                        r.token_begin < before->token_begin + before->token_count);
    if (bad) note(s.error, DeviceHashErrorCode::kRun, j);
    if (verify && r.token_count > s.verify_tokens_max) note(s.error, DeviceHashErrorCode::kVerifyBlock, j);
    runs_ok &= !bad;
  }
  if (!runs_ok) return;  // ids unspecified: left DEAD
  std::vector<uint8_t> run_has_bad(step_runs.size(), 0);
  for (size_t j = 0; j < step_runs.size(); ++j)
    for (int64_t t = step_runs[j].token_begin; t < step_runs[j].token_begin + step_runs[j].token_count; ++t)
      if (!h.token_in_vocabulary(tokens[static_cast<size_t>(t)])) {
        note(s.error, DeviceHashErrorCode::kToken, static_cast<uint64_t>(t));
        run_has_bad[j] = 1;
      }

  // Hash every run after a copy of its history.
  std::vector<std::vector<int64_t>> after(step_runs.size());
  std::vector<int64_t> sanitized;
  for (size_t j = 0; j < step_runs.size(); ++j) {
    const DeviceRunWords& r = step_runs[j];
    const auto slot = static_cast<size_t>(r.slot);
    after[j].assign(s.histories.begin() + static_cast<std::ptrdiff_t>(slot * length),
                    s.histories.begin() + static_cast<std::ptrdiff_t>((slot + 1) * length));
    const auto begin = static_cast<size_t>(r.token_begin), count = static_cast<size_t>(r.token_count);
    std::span<const int64_t> run_tokens = tokens.subspan(begin, count);
    const std::span<int64_t> out = row_ids.subspan(begin * heads, count * heads);
    if (run_has_bad[j] == 0) {
      h.hash_run(after[j], run_tokens, out);
      continue;
    }
    // A bad token stands in as id 0; every id whose lookback reads it is DEAD.
    sanitized.assign(run_tokens.begin(), run_tokens.end());
    for (int64_t& v : sanitized)
      if (!h.token_in_vocabulary(v)) v = 0;
    h.hash_run(after[j], sanitized, out);
    for (int64_t t = r.token_begin; t < r.token_begin + r.token_count; ++t)
      if (lookback_reads_bad(h, tokens, r.token_begin, t))
        std::fill_n(row_ids.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(t) * heads), heads, kDeadId);
  }
  if (*s.error != kNoDeviceHashError) return;  // this step's error, or an earlier one not yet read

  for (size_t j = 0; j < step_runs.size(); ++j) {
    const DeviceRunWords& r = step_runs[j];
    const auto slot = static_cast<size_t>(r.slot);
    if (!verify) {
      std::copy(after[j].begin(), after[j].end(), s.histories.begin() + static_cast<std::ptrdiff_t>(slot * length));
      continue;
    }
    const auto block = tokens.subspan(static_cast<size_t>(r.token_begin), static_cast<size_t>(r.token_count));
    std::copy(block.begin(), block.end(),
              s.pending.begin() + static_cast<std::ptrdiff_t>(slot * static_cast<size_t>(s.verify_tokens_max)));
    s.pending_counts[slot] = r.token_count;
  }
}

void request_commit_reference(const TableHasher& h, int64_t commit_count, std::span<const DeviceCommitWords> commits,
                              RequestStateHost s) {
  const size_t length = static_cast<size_t>(h.history_length());
  ENGRAM_CHECK(s.error != nullptr && static_cast<int>(commits.size()) == s.slot_count);
  if (commit_count < 0 || commit_count > s.slot_count) {
    note(s.error, DeviceHashErrorCode::kCommitCount, 0);
    return;
  }
  const auto step = commits.first(static_cast<size_t>(commit_count));
  for (size_t j = 0; j < step.size(); ++j) {
    const DeviceCommitWords& c = step[j];
    const bool slot_ok = c.slot >= 0 && c.slot < s.slot_count;
    const int64_t held = slot_ok ? s.pending_counts[static_cast<size_t>(c.slot)] : 0;
    if (!slot_ok || held < 1 || held > s.verify_tokens_max || c.accepted_drafts < 0 || c.accepted_drafts > held - 1)
      note(s.error, DeviceHashErrorCode::kCommit, j);
  }
  if (*s.error != kNoDeviceHashError) return;
  for (const DeviceCommitWords& c : step) {
    const auto slot = static_cast<size_t>(c.slot);
    const auto block = std::span<const int64_t>(s.pending).subspan(slot * static_cast<size_t>(s.verify_tokens_max),
                                                                   static_cast<size_t>(c.accepted_drafts) + 1);
    h.advance(s.histories.subspan(slot * length, length), block);
    s.pending_counts[slot] = 0;
  }
}

}  // namespace engram::kernels
