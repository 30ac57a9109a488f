#include "kernels/request_hash.h"

#include <fmt/format.h>

#include "kernels/gather_launch.h"

namespace engram::kernels {
namespace {

constexpr int kThreads = 256;
// A tile's ids: tokens per block = this / heads (1..kTileTokensMax). Two
// ids a thread: the block's phases are short chains, so more, smaller
// blocks finish sooner (Nsight Compute on an H200: 1,024 left 196 blocks of
// 862 instructions a warp at 12 cycles each, 0.3 waves).
constexpr int kIdsPerBlock = 512;
constexpr int kTileTokensMax = 128;
constexpr int kSharedRunsMax = 256;        // runs staged in shared memory; more are searched in global memory
constexpr int kSharedHeadsMax = 128;       // heads staged in shared memory; more are read from global memory
constexpr int kSharedHistoryWords = 1024;  // each history buffer staged when it holds at most this many ids
constexpr int kHistoryMax = kMaxHashOrder - 1;
constexpr int kHistoryWordsPerThread = 2 * kSharedHistoryWords / kThreads;
// The staging loads give each thread at most one run, one token (of a tile
// and its halo) and one head.
static_assert(kSharedRunsMax <= kThreads && kTileTokensMax + kHistoryMax <= kThreads && kSharedHeadsMax <= kThreads);
static_assert(2 * kSharedHistoryWords % kThreads == 0);

__device__ bool in_vocabulary(int64_t v, int64_t vocab) { return v == kDeadId || (v >= 0 && v < vocab); }

__device__ void note_error(uint64_t* error, DeviceHashErrorCode code, uint64_t index) {
  atomicMin(reinterpret_cast<unsigned long long*>(error), static_cast<unsigned long long>(device_hash_error(code, index)));
}

// A history (max_order - 1 ids, newest first) after `count` tokens (token(k)
// is the k-th): TableHasher::advance, one thread per slot. `old` is read
// whole before `out` is written, so they may be the same.
template <typename Token>
__device__ void advance_history(const RequestHashTable& t, const int64_t* old_history, int64_t* out, int64_t count,
                                Token token) {
  const int length = t.max_order - 1;
  const bool barrier = t.dead_token_rule != DeadTokenRule::kLiteral;
  int64_t old[kHistoryMax > 0 ? kHistoryMax : 1];
  for (int k = 0; k < length; ++k) old[k] = old_history[k];
  bool blocked = false;
  for (int k = 0; k < length; ++k) {
    const int64_t pos = count - 1 - k;
    int64_t v;
    if (blocked) {
      v = t.pad_id;
    } else if (pos >= 0) {
      v = token(pos);
      if (barrier && v == kDeadId) {
        blocked = true;
        v = t.pad_id;
      }
    } else {
      v = old[k - count];
    }
    out[k] = v;
  }
}

// A run by itself: a real slot, at least one token, inside the tokens.
__device__ bool run_alone_good(const DeviceRunWords& r, int slot_count, int64_t token_count) {
  return r.slot >= 0 && r.slot < slot_count && r.token_count >= 1 && r.token_begin >= 0 &&
         r.token_begin <= token_count && r.token_count <= token_count - r.token_begin;
}

// Run j good: by itself, and after run j - 1 when that one is good by itself
// (a bad one is flagged for itself).
__device__ bool run_good(const DeviceRunWords* runs, int64_t j, int slot_count, int64_t token_count) {
  const DeviceRunWords r = runs[j];
  if (!run_alone_good(r, slot_count, token_count)) return false;
  if (j == 0) return true;
  const DeviceRunWords before = runs[j - 1];
  return !run_alone_good(before, slot_count, token_count) || r.token_begin >= before.token_begin + before.token_count;
}

// No block waits for another: every block loads what it needs in one round
// trip (the step's header and runs, its tile of tokens with their lookback
// halo, the heads, both history buffers where they fit), hashes its tile,
// and writes the histories (or pending blocks) of the runs that end in its
// tile into the buffer the step does not read; slots no good run advances
// are copied across by a block chosen by slot number. Histories are double
// buffered by the step header's read buffer, which the host flips with
// each extend, so no block writes what another reads.
__global__ void __launch_bounds__(kThreads) request_hash_kernel(RequestHashArgs a, int tile_tokens) {
  const RequestHashTable& t = a.table;
  __shared__ DeviceRunWords runs_s[kSharedRunsMax];
  __shared__ int64_t tokens_s[kTileTokensMax + kHistoryMax];  // bad tokens taken as DEAD
  __shared__ uint8_t bad_s[kTileTokensMax + kHistoryMax];
  __shared__ int64_t mixes_s[kTileTokensMax][kMaxHashOrder];   // [token][order - 1]
  __shared__ uint8_t dead_s[kTileTokensMax];
  __shared__ DeviceHashHead heads_s[kSharedHeadsMax];
  __shared__ int64_t history_s[2][kSharedHistoryWords];
  __shared__ uint32_t advanced_s[kMaxDeviceRequestSlots / 32];  // slots a good run advances (extend)
  __shared__ int64_t header_s[2];

  const int tid = static_cast<int>(threadIdx.x);
  const int64_t tile_begin = static_cast<int64_t>(blockIdx.x) * tile_tokens;
  const int64_t tile_end = min(tile_begin + tile_tokens, a.token_count);
  const int length = t.max_order - 1;
  const int64_t staged_begin = tile_begin > length ? tile_begin - length : 0;
  const int staged_runs = min(t.slot_count, kSharedRunsMax);
  const int history_words = t.slot_count * length;
  const bool histories_staged = history_words <= kSharedHistoryWords;
  const bool heads_staged = t.head_count <= kSharedHeadsMax;

  // One round trip: every global load of the block is issued into registers
  // before the first is stored to shared memory (a load-then-store loop per
  // array waited for each array in turn: one dependent trip per array, which
  // was most of a short step's cost). Each thread holds at most one header
  // word, one run, one token, one head and kHistoryWordsPerThread history
  // words (the static_asserts above the kernel).
  const int64_t header_v = tid < 2 ? a.header[tid] : 0;
  DeviceRunWords run_v{};
  if (tid < staged_runs) run_v = a.runs[tid];
  const int64_t staged_p = staged_begin + tid;
  const int64_t token_v = staged_p < tile_end ? a.tokens[staged_p] : 0;
  DeviceHashHead head_v{};
  if (heads_staged && tid < t.head_count) head_v = t.heads[tid];
  int64_t history_v[kHistoryWordsPerThread];
#pragma unroll
  for (int i = 0; i < kHistoryWordsPerThread; ++i) {
    const int w = tid + i * kThreads;
    history_v[i] = histories_staged && w < 2 * history_words ? t.histories[w] : 0;
  }
  if (tid < 2) header_s[tid] = header_v;
  if (tid < staged_runs) runs_s[tid] = run_v;
  if (staged_p < tile_end) {
    const bool bad = !in_vocabulary(token_v, t.compressed_vocab_size);
    tokens_s[staged_p - staged_begin] = bad ? kDeadId : token_v;
    bad_s[staged_p - staged_begin] = bad ? 1 : 0;
  }
  if (heads_staged && tid < t.head_count) heads_s[tid] = head_v;
#pragma unroll
  for (int i = 0; i < kHistoryWordsPerThread; ++i) {
    const int w = tid + i * kThreads;
    // No division by history_words (one per word cost more than the hash).
    if (histories_staged && w < 2 * history_words) {
      if (w < history_words) history_s[0][w] = history_v[i];
      else history_s[1][w - history_words] = history_v[i];
    }
  }
  if (!a.verify)
    for (int w = tid; w < (t.slot_count + 31) / 32; w += kThreads) advanced_s[w] = 0;
  __syncthreads();
  const int64_t run_count_read = header_s[0];
  const int64_t run_count = run_count_read < 0 || run_count_read > t.slot_count ? 0 : run_count_read;
  const int read_buffer = header_s[1] != 0 ? 1 : 0;
  const DeviceRunWords* runs = run_count <= kSharedRunsMax ? runs_s : a.runs;
  const DeviceHashHead* heads = heads_staged ? heads_s : t.heads;
  const int64_t* old_histories =
      histories_staged ? history_s[read_buffer] : t.histories + static_cast<int64_t>(read_buffer) * history_words;
  int64_t* new_histories = t.histories + static_cast<int64_t>(1 - read_buffer) * history_words;
  const bool barrier = t.dead_token_rule != DeadTokenRule::kLiteral;

  // A thread per token: its run, its window, the mix of every order.
  if (tid < tile_end - tile_begin) {
    const int64_t pos_t = tile_begin + tid;
    int64_t lo = 0, hi = run_count;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (runs[mid].token_begin <= pos_t) lo = mid + 1;
      else hi = mid;
    }
    bool dead = true;
    if (lo > 0 && run_good(runs, lo - 1, t.slot_count, a.token_count)) {
      const DeviceRunWords r = runs[lo - 1];
      if (pos_t < r.token_begin + r.token_count) {
        const int64_t at = pos_t - staged_begin;
        const bool bad = bad_s[at] != 0;
        if (bad) note_error(t.error, DeviceHashErrorCode::kToken, static_cast<uint64_t>(pos_t));
        const int64_t c = tokens_s[at];
        const int64_t* history = old_histories + r.slot * length;
        bool blocked = false;
        int64_t mix = 0;
        for (int k = 0; k < t.max_order; ++k) {
          const int64_t pos = pos_t - k;
          int64_t w;
          if (blocked) {
            w = t.pad_id;
          } else if (pos >= r.token_begin) {
            w = tokens_s[pos - staged_begin];
            if (barrier && w == kDeadId) {
              blocked = true;
              w = t.pad_id;
            }
          } else {
            w = history[r.token_begin - pos - 1];
          }
          // Wrapping int64 products: the CPU's (no overflow for ids in the vocabulary).
          mix ^= static_cast<int64_t>(static_cast<uint64_t>(w) * static_cast<uint64_t>(t.multipliers[k]));
          mixes_s[tid][k] = mix;
        }
        dead = bad || (c == kDeadId && t.dead_token_rule == DeadTokenRule::kBarrierNoRow);
      }
    }
    dead_s[tid] = dead ? 1 : 0;
  }

  // The runs that end in this tile: their new histories (extend) or pending
  // blocks (verify). Block 0 also reports every bad run.
  for (int64_t j = tid; j < run_count; j += kThreads) {
    const DeviceRunWords r = runs[j];
    const bool good = run_good(runs, j, t.slot_count, a.token_count);
    if (blockIdx.x == 0) {
      if (!good) note_error(t.error, DeviceHashErrorCode::kRun, static_cast<uint64_t>(j));
      if (a.verify && r.token_count > t.verify_tokens_max)
        note_error(t.error, DeviceHashErrorCode::kVerifyBlock, static_cast<uint64_t>(j));
    }
    if (!good) continue;
    if (!a.verify) atomicOr(&advanced_s[r.slot / 32], 1u << (r.slot % 32));
    const int64_t last = r.token_begin + r.token_count - 1;
    if (last < tile_begin || last >= tile_end) continue;
    if (a.verify) {
      if (r.token_count > t.verify_tokens_max) continue;
      int64_t* block = t.pending + r.slot * t.verify_tokens_max;
      for (int64_t k = 0; k < r.token_count; ++k) {
        const int64_t v = a.tokens[r.token_begin + k];
        block[k] = in_vocabulary(v, t.compressed_vocab_size) ? v : kDeadId;
      }
      t.pending_counts[r.slot] = r.token_count;
    } else {
      // The run's last max_order - 1 tokens are in this tile and its halo.
      advance_history(t, old_histories + r.slot * length, new_histories + r.slot * length, r.token_count,
                      [&](int64_t k) { return tokens_s[r.token_begin + k - staged_begin]; });
    }
  }
  if (run_count_read != run_count && blockIdx.x == 0 && tid == 0)
    note_error(t.error, DeviceHashErrorCode::kRunCount, 0);
  __syncthreads();

  // A thread per (token, head): coalesced ids. 32-bit indices: a tile holds
  // at most kTileTokensMax x heads ids. The (token, head) of each id steps
  // by a stride found once, not a division per id.
  const int tile_ids = static_cast<int>(tile_end - tile_begin) * t.head_count;
  int64_t* out = a.row_ids + tile_begin * t.head_count;
  const int step_tokens = kThreads / t.head_count;
  const int step_heads = kThreads - step_tokens * t.head_count;
  int i = tid / t.head_count;
  int head = tid - i * t.head_count;
  for (int idx = tid; idx < tile_ids;
       idx += kThreads, i += step_tokens, head += step_heads, i += head >= t.head_count ? 1 : 0,
           head -= head >= t.head_count ? t.head_count : 0) {
    if (dead_s[i] != 0) {
      out[idx] = kDeadId;
      continue;
    }
    const DeviceHashHead h = heads[head];
    out[idx] = head_row(mixes_s[i][h.order - 1], h);
  }

  // Slots no good run advances keep their history: copied across by the
  // block their number picks.
  if (!a.verify && length > 0)
    for (int64_t w = static_cast<int64_t>(blockIdx.x) * kThreads + tid; w < history_words;
         w += static_cast<int64_t>(gridDim.x) * kThreads) {
      const int slot = static_cast<int>(w / length);
      if ((advanced_s[slot / 32] >> (slot % 32) & 1u) == 0) new_histories[w] = old_histories[w];
    }
}

// One block: every commit checked, then (none bad) each slot's history
// advanced in place by its pending block's anchor and accepted drafts.
__global__ void __launch_bounds__(kThreads) request_commit_kernel(RequestCommitArgs a) {
  const RequestHashTable& t = a.table;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t count = a.header[0];
  const int length = t.max_order - 1;
  int64_t* histories = t.histories + (a.header[1] != 0 ? static_cast<int64_t>(t.slot_count) * length : 0);
  if (count < 0 || count > t.slot_count) {
    if (tid == 0) note_error(t.error, DeviceHashErrorCode::kCommitCount, 0);
    return;
  }
  __shared__ int bad_s;
  if (tid == 0) bad_s = 0;
  __syncthreads();
  for (int64_t j = tid; j < count; j += kThreads) {
    const DeviceCommitWords c = a.commits[j];
    const bool slot_ok = c.slot >= 0 && c.slot < t.slot_count;
    const int64_t held = slot_ok ? t.pending_counts[c.slot] : 0;
    if (!slot_ok || held < 1 || held > t.verify_tokens_max || c.accepted_drafts < 0 || c.accepted_drafts > held - 1) {
      note_error(t.error, DeviceHashErrorCode::kCommit, static_cast<uint64_t>(j));
      bad_s = 1;
    }
  }
  __syncthreads();
  if (bad_s != 0) return;
  for (int64_t j = tid; j < count; j += kThreads) {
    const DeviceCommitWords c = a.commits[j];
    const int64_t* block = t.pending + c.slot * t.verify_tokens_max;
    int64_t* history = histories + c.slot * length;
    advance_history(t, history, history, c.accepted_drafts + 1, [&](int64_t k) { return block[k]; });
    t.pending_counts[c.slot] = 0;
  }
}

Status check_table(const RequestHashTable& t, const char* kernel) {
  if (t.heads == nullptr || t.histories == nullptr || t.pending == nullptr || t.pending_counts == nullptr ||
      t.error == nullptr)
    return invalid_argument(fmt::format("{}: heads, histories, pending, pending_counts and error must be device "
                                        "pointers, not null", kernel));
  if (t.head_count < 1 || t.max_order < 1 || t.max_order > kMaxHashOrder || t.slot_count < 1 ||
      t.slot_count > kMaxDeviceRequestSlots ||
      t.verify_tokens_max < 1 || t.compressed_vocab_size < 1)
    return invalid_argument(fmt::format("{}: head_count {} and slot_count {} must be >= 1, max_order {} in 1..{}, "
                                        "verify_tokens_max {} and compressed_vocab_size {} >= 1",
                                        kernel, t.head_count, t.slot_count, t.max_order, kMaxHashOrder,
                                        t.verify_tokens_max, t.compressed_vocab_size));
  return Status::ok();
}

}  // namespace

Status request_hash(const RequestHashArgs& a, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(check_table(a.table, "request_hash"));
  if (a.token_count < 0 || a.header == nullptr || a.runs == nullptr ||
      (a.token_count > 0 && (a.tokens == nullptr || a.row_ids == nullptr)))
    return invalid_argument(fmt::format("request_hash: token_count {} must be >= 0 and header, runs, tokens and "
                                        "row_ids device pointers", a.token_count));
  const int tile_tokens = std::max(1, std::min(kTileTokensMax, kIdsPerBlock / a.table.head_count));
  // At least one block: with no tokens, it still copies the histories across.
  const int64_t blocks = std::max<int64_t>(1, (a.token_count + tile_tokens - 1) / tile_tokens);
  if (blocks > 0x7fffffff) return invalid_argument(fmt::format("request_hash: {} tokens exceed one launch", a.token_count));
  request_hash_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, tile_tokens);
  return detail::launch_status("request_hash");
}

Status request_commit(const RequestCommitArgs& a, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(check_table(a.table, "request_commit"));
  if (a.header == nullptr || a.commits == nullptr)
    return invalid_argument("request_commit: header and commits must be device pointers, not null");
  request_commit_kernel<<<1, kThreads, 0, stream>>>(a);
  return detail::launch_status("request_commit");
}

}  // namespace engram::kernels
