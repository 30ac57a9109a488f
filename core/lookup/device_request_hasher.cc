#include "core/lookup/device_request_hasher.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/text_list.h"
#include "core/base/units.h"
#include "core/model/request_hash_words.h"

namespace engram {
namespace {

constexpr uint64_t kBufferAlignment = 256;

}  // namespace

Result<std::unique_ptr<DeviceRequestHasher>> DeviceRequestHasher::create(DeviceCompute& compute, TableHasher hasher,
                                                                         const DeviceRequestHasherOptions& options) {
  ENGRAM_ASSIGN_OR_RETURN(RequestSlots slots, RequestSlots::create(options.slot_count));
  if (options.slot_count > kMaxDeviceRequestSlots)
    return invalid_argument(fmt::format("device request hasher: slot_count is {}; a device hasher keeps at most {} "
                                        "slots (its kernel marks a step's slots in shared memory): use more hashers",
                                        options.slot_count, kMaxDeviceRequestSlots));
  constexpr int64_t kTokensMaxLimit = int64_t{1} << 30;
  if (options.tokens_max < 1 || options.tokens_max > kTokensMaxLimit)
    return invalid_argument(fmt::format("device request hasher: tokens_max is {}; it must be 1..{} (the largest step)",
                                        options.tokens_max, kTokensMaxLimit));
  if (options.verify_tokens_max < 1 || options.verify_tokens_max > kTokensMaxLimit)
    return invalid_argument(fmt::format("device request hasher: verify_tokens_max is {}; it must be 1..{} (the "
                                        "longest verify block, anchor and drafts)",
                                        options.verify_tokens_max, kTokensMaxLimit));
  std::unique_ptr<DeviceRequestHasher> h(
      new DeviceRequestHasher(compute, std::move(hasher), options, std::move(slots)));
  const auto slot_count = static_cast<uint64_t>(options.slot_count);
  const auto length = static_cast<uint64_t>(h->hasher_.history_length());
  const auto heads = static_cast<uint64_t>(h->hasher_.head_count());
  const auto tokens_max = static_cast<uint64_t>(options.tokens_max);
  Layout& l = h->layout_;
  uint64_t at = 0;
  auto place = [&at](uint64_t bytes) {
    const uint64_t offset = at;
    at = round_up(at + std::max<uint64_t>(bytes, 8), kBufferAlignment);
    return offset;
  };
  l.heads = place(heads * sizeof(DeviceHashHead));
  l.histories = place(2 * slot_count * length * 8);  // two buffers: an extend reads one and writes the other
  l.pending = place(slot_count * static_cast<uint64_t>(options.verify_tokens_max) * 8);
  l.pending_counts = place(slot_count * 8);
  l.error = place(8);
  l.run_header = place(16);
  l.runs = place(slot_count * sizeof(DeviceRunWords));
  l.commit_header = place(16);
  l.commits = place(slot_count * sizeof(DeviceCommitWords));
  l.tokens = place(tokens_max * 8);
  l.row_ids = place(tokens_max * heads * 8);
  l.bytes = at;
  ENGRAM_ASSIGN_OR_RETURN(h->base_, compute.allocate(l.bytes));

  // Every word set: heads, histories at a sequence start, no pending block,
  // no error, no runs or commits, ids all DEAD.
  const std::vector<DeviceHashHead> head_words = device_hash_heads(h->hasher_);
  ENGRAM_RETURN_IF_ERROR(h->write_words(l.heads, std::span<const DeviceHashHead>(head_words)));
  const std::vector<int64_t> pads(2 * slot_count * length, h->hasher_.pad_id());
  ENGRAM_RETURN_IF_ERROR(h->write_words(l.histories, std::span<const int64_t>(pads)));
  const std::vector<int64_t> zeros(std::max(slot_count * static_cast<uint64_t>(options.verify_tokens_max), tokens_max), 0);
  ENGRAM_RETURN_IF_ERROR(h->write_words(l.pending, std::span<const int64_t>(zeros).first(
                                                        slot_count * static_cast<uint64_t>(options.verify_tokens_max))));
  ENGRAM_RETURN_IF_ERROR(h->write_words(l.pending_counts, std::span<const int64_t>(zeros).first(slot_count)));
  ENGRAM_RETURN_IF_ERROR(h->write_words(l.tokens, std::span<const int64_t>(zeros).first(tokens_max)));
  const uint64_t no_error = kNoDeviceHashError;
  ENGRAM_RETURN_IF_ERROR(h->write_words(l.error, std::span<const uint64_t>(&no_error, 1)));
  ENGRAM_RETURN_IF_ERROR(h->write_words(l.run_header, std::span<const int64_t>(zeros).first(2)));
  ENGRAM_RETURN_IF_ERROR(h->write_words(l.commit_header, std::span<const int64_t>(zeros).first(2)));
  ENGRAM_RETURN_IF_ERROR(compute.fill_async(h->row_ids(), 0xff, tokens_max * heads * 8, StreamRef{}));  // -1: DEAD
  ENGRAM_RETURN_IF_ERROR(compute.synchronize(StreamRef{}));
  return h;
}

DeviceRequestHasher::DeviceRequestHasher(DeviceCompute& compute, TableHasher hasher,
                                         const DeviceRequestHasherOptions& options, RequestSlots slots)
    : compute_(compute), hasher_(std::move(hasher)), options_(options), slots_(std::move(slots)) {}

DeviceRequestHasher::~DeviceRequestHasher() { free().ignore(); }

Status DeviceRequestHasher::free() {
  if (base_ == 0) return Status::ok();
  return compute_.free(std::exchange(base_, 0));
}

template <typename T>
Status DeviceRequestHasher::write_words(uint64_t offset, std::span<const T> words) {
  ENGRAM_CHECK(base_ != 0);
  return compute_.copy_to_device(base_ + offset, std::as_bytes(words));
}

template <typename T>
Result<T> DeviceRequestHasher::read_word(uint64_t offset) const {
  ENGRAM_CHECK(base_ != 0);
  T value{};
  ENGRAM_RETURN_IF_ERROR(compute_.copy_to_host(std::as_writable_bytes(std::span(&value, 1)), base_ + offset));
  return value;
}

DeviceRequestState DeviceRequestHasher::device_state() const {
  DeviceRequestState s;
  s.hasher = &hasher_;
  s.heads = base_ + layout_.heads;
  s.slot_count = options_.slot_count;
  s.histories = base_ + layout_.histories;
  s.verify_tokens_max = options_.verify_tokens_max;
  s.pending = base_ + layout_.pending;
  s.pending_counts = base_ + layout_.pending_counts;
  s.error = base_ + layout_.error;
  return s;
}

Status DeviceRequestHasher::begin(int slot, std::span<const int64_t> preceding_ids) {
  ENGRAM_RETURN_IF_ERROR(slots_.check_begin(hasher_, slot, preceding_ids));
  std::vector<int64_t> history = hasher_.empty_history();
  hasher_.advance(history, preceding_ids);
  ENGRAM_CHECK(history.size() == static_cast<size_t>(hasher_.history_length()));  // history_offset's stride
  ENGRAM_RETURN_IF_ERROR(
      write_words(history_offset(slot), std::span<const int64_t>(history)));
  const int64_t no_block = 0;
  ENGRAM_RETURN_IF_ERROR(
      write_words(layout_.pending_counts + static_cast<uint64_t>(slot) * 8, std::span<const int64_t>(&no_block, 1)));
  slots_.begin(slot);
  return Status::ok();
}

Status DeviceRequestHasher::release(int slot) {
  ENGRAM_RETURN_IF_ERROR(slots_.check_release(slot));
  slots_.release(slot);  // begin resets the slot's device words
  return Status::ok();
}

Status DeviceRequestHasher::check_step_tokens(std::span<const int64_t> tokens, const char* operation) const {
  if (static_cast<int64_t>(tokens.size()) > options_.tokens_max)
    return invalid_argument(fmt::format("{}: the step holds {} tokens; the device hasher was made for at most {} "
                                        "(DeviceRequestHasherOptions::tokens_max): split the step or make it larger",
                                        operation, tokens.size(), options_.tokens_max));
  return Status::ok();
}

uint64_t DeviceRequestHasher::history_offset(int slot) const {
  const auto length = static_cast<uint64_t>(hasher_.history_length());
  return layout_.histories +
         (static_cast<uint64_t>(history_buffer_) * static_cast<uint64_t>(options_.slot_count) + static_cast<uint64_t>(slot)) *
             length * 8;
}

Status DeviceRequestHasher::write_step(std::span<const int64_t> tokens, std::span<const RequestRun> runs) {
  // Real, non-empty runs by token_begin: the kernel finds a token's run by
  // binary search; idle runs and padding are DEAD either way.
  std::vector<DeviceRunWords> words;
  for (const RequestRun& r : runs)
    if (r.slot != kIdleSlot && r.token_count > 0) words.push_back(DeviceRunWords{r.slot, r.token_begin, r.token_count});
  std::sort(words.begin(), words.end(),
            [](const DeviceRunWords& a, const DeviceRunWords& b) { return a.token_begin < b.token_begin; });
  ENGRAM_RETURN_IF_ERROR(write_words(layout_.tokens, tokens));
  ENGRAM_RETURN_IF_ERROR(write_words(layout_.runs, std::span<const DeviceRunWords>(words)));
  const int64_t header[2] = {static_cast<int64_t>(words.size()), history_buffer_};
  return write_words(layout_.run_header, std::span<const int64_t>(header));
}

Status DeviceRequestHasher::stage_extend(std::span<const int64_t> tokens, std::span<const RequestRun> runs) {
  const size_t heads = static_cast<size_t>(hasher_.head_count());
  ENGRAM_RETURN_IF_ERROR(slots_.check_extend(hasher_, tokens, runs, tokens.size() * heads));
  ENGRAM_RETURN_IF_ERROR(check_step_tokens(tokens, "extend"));
  ENGRAM_RETURN_IF_ERROR(write_step(tokens, runs));
  history_buffer_ = 1 - history_buffer_;  // the step writes the other buffer
  last_step_ = "extend";
  return Status::ok();
}

Status DeviceRequestHasher::stage_verify(std::span<const int64_t> tokens, std::span<const RequestRun> runs) {
  const size_t heads = static_cast<size_t>(hasher_.head_count());
  ENGRAM_RETURN_IF_ERROR(slots_.check_verify(hasher_, tokens, runs, tokens.size() * heads));
  ENGRAM_RETURN_IF_ERROR(check_step_tokens(tokens, "verify"));
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i].slot != kIdleSlot && runs[i].token_count > options_.verify_tokens_max)
      return invalid_argument(fmt::format(
          "verify: request {} (slot {}): runs[{}].token_count is {}; the device hasher holds verify blocks of at most "
          "{} tokens (DeviceRequestHasherOptions::verify_tokens_max)",
          i, runs[i].slot, i, runs[i].token_count, options_.verify_tokens_max));
  ENGRAM_RETURN_IF_ERROR(write_step(tokens, runs));
  slots_.verified(runs);
  last_step_ = "verify";
  return Status::ok();
}

Status DeviceRequestHasher::stage_commit(std::span<const VerifyCommit> commits) {
  ENGRAM_RETURN_IF_ERROR(slots_.check_commit(commits));
  std::vector<DeviceCommitWords> words;
  for (const VerifyCommit& c : commits) words.push_back(DeviceCommitWords{c.slot, c.accepted_drafts});
  ENGRAM_RETURN_IF_ERROR(write_words(layout_.commits, std::span<const DeviceCommitWords>(words)));
  const int64_t header[2] = {static_cast<int64_t>(words.size()), history_buffer_};
  ENGRAM_RETURN_IF_ERROR(write_words(layout_.commit_header, std::span<const int64_t>(header)));
  slots_.committed(commits);
  last_step_ = "commit";
  return Status::ok();
}

Status DeviceRequestHasher::check_enqueue(int64_t token_count, const char* operation) const {
  if (base_ == 0) return failed_precondition(fmt::format("{}: the device request hasher was freed", operation));
  if (token_count < 0 || token_count > options_.tokens_max)
    return invalid_argument(fmt::format("{}: token_count is {}; it must be 0..{} (tokens_max)", operation, token_count,
                                        options_.tokens_max));
  return Status::ok();
}

// Extend and verify enqueue the same step over the staged buffers; only the
// flag (verify leaves the histories as they are) differs.
Status DeviceRequestHasher::enqueue_hash(StreamRef stream, int64_t token_count, bool verify,
                                         const char* operation) const {
  ENGRAM_RETURN_IF_ERROR(check_enqueue(token_count, operation));
  DeviceRequestHash a;
  a.state = device_state();
  a.verify = verify;
  a.tokens = tokens();
  a.token_count = token_count;
  a.header = base_ + layout_.run_header;
  a.runs = base_ + layout_.runs;
  a.row_ids = row_ids();
  return compute_.hash_requests(a, stream);
}

Status DeviceRequestHasher::enqueue_extend(StreamRef stream, int64_t token_count) const {
  return enqueue_hash(stream, token_count, /*verify=*/false, "enqueue_extend");
}

Status DeviceRequestHasher::enqueue_verify(StreamRef stream, int64_t token_count) const {
  return enqueue_hash(stream, token_count, /*verify=*/true, "enqueue_verify");
}

Status DeviceRequestHasher::enqueue_commit(StreamRef stream) const {
  ENGRAM_RETURN_IF_ERROR(check_enqueue(0, "enqueue_commit"));
  DeviceRequestCommit a;
  a.state = device_state();
  a.header = base_ + layout_.commit_header;
  a.commits = base_ + layout_.commits;
  return compute_.commit_requests(a, stream);
}

Status DeviceRequestHasher::extend(std::span<const int64_t> tokens, std::span<const RequestRun> runs, StreamRef stream) {
  ENGRAM_RETURN_IF_ERROR(stage_extend(tokens, runs));
  return enqueue_extend(stream, static_cast<int64_t>(tokens.size()));
}

Status DeviceRequestHasher::verify(std::span<const int64_t> tokens, std::span<const RequestRun> runs, StreamRef stream) {
  ENGRAM_RETURN_IF_ERROR(stage_verify(tokens, runs));
  return enqueue_verify(stream, static_cast<int64_t>(tokens.size()));
}

Status DeviceRequestHasher::commit(std::span<const VerifyCommit> commits, StreamRef stream) {
  ENGRAM_RETURN_IF_ERROR(stage_commit(commits));
  return enqueue_commit(stream);
}

Status DeviceRequestHasher::check_device_errors() {
  ENGRAM_ASSIGN_OR_RETURN(const uint64_t error, read_word<uint64_t>(layout_.error));
  if (error == kNoDeviceHashError) return Status::ok();
  const uint64_t cleared = kNoDeviceHashError;
  ENGRAM_RETURN_IF_ERROR(write_words(layout_.error, std::span<const uint64_t>(&cleared, 1)));
  const uint64_t index = device_hash_error_index(error);

  switch (device_hash_error_code(error)) {
    case DeviceHashErrorCode::kRunCount: {
      ENGRAM_ASSIGN_OR_RETURN(const int64_t count, read_word<int64_t>(layout_.run_header));
      return invalid_argument(fmt::format("{} on the device: the run count was {}; it must be 0..{} (slot_count); no "
                                          "run was hashed or advanced", last_step_, count, options_.slot_count));
    }
    case DeviceHashErrorCode::kRun:
    case DeviceHashErrorCode::kVerifyBlock: {
      ENGRAM_ASSIGN_OR_RETURN(const DeviceRunWords r, read_word<DeviceRunWords>(layout_.runs + index * sizeof(DeviceRunWords)));
      return invalid_argument(fmt::format(
          "{} on the device: run {} (slot {}, tokens {}) {}", last_step_, index, r.slot,
          half_open_range_text(r.token_begin, r.token_count),
          device_hash_error_code(error) == DeviceHashErrorCode::kRun
              ? "is empty, names no slot, leaves the tokens or overlaps the run before it; it was not hashed and its "
                "slot not advanced (the step's ids are not to be used)"
              : fmt::format("is a verify block longer than verify_tokens_max ({}); it was not stored",
                            options_.verify_tokens_max)));
    }
    case DeviceHashErrorCode::kToken: {
      ENGRAM_ASSIGN_OR_RETURN(const int64_t token, read_word<int64_t>(layout_.tokens + index * 8));
      const Status refused = hasher_.check_token(token, fmt::format("{} on the device: tokens[{}]", last_step_, index));
      return invalid_argument(refused.message() +
                              "; the device took it as DEAD: its own ids are DEAD, and the lookback, history and "
                              "pending block read it as DEAD");
    }
    case DeviceHashErrorCode::kCommitCount: {
      ENGRAM_ASSIGN_OR_RETURN(const int64_t count, read_word<int64_t>(layout_.commit_header));
      return invalid_argument(fmt::format("commit on the device: the commit count was {}; it must be 0..{} (slot_count); "
                                          "no commit was applied", count, options_.slot_count));
    }
    case DeviceHashErrorCode::kCommit: {
      ENGRAM_ASSIGN_OR_RETURN(const DeviceCommitWords c,
                              read_word<DeviceCommitWords>(layout_.commits + index * sizeof(DeviceCommitWords)));
      return invalid_argument(fmt::format(
          "commit on the device: commits[{}] (slot {}, accepted_drafts {}) names no slot waiting for commit or "
          "accepts more drafts than its verify block held; none of the step's commits was applied",
          index, c.slot, c.accepted_drafts));
    }
  }
  return internal_error(fmt::format("device request hasher: the error word holds {:#x}, which no step writes", error));
}

Result<std::vector<int64_t>> DeviceRequestHasher::read_histories() const {
  std::vector<int64_t> out(static_cast<size_t>(options_.slot_count) * static_cast<size_t>(hasher_.history_length()));
  if (out.empty()) return out;
  ENGRAM_RETURN_IF_ERROR(compute_.copy_to_host(std::as_writable_bytes(std::span(out)), base_ + history_offset(0)));
  return out;
}

}  // namespace engram
