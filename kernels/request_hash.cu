#include "kernels/request_hash.h"

#include <fmt/format.h>

#include "kernels/gather_launch.h"

namespace engram::kernels {
namespace {

constexpr int kThreads = 256;
// Eight lanes a token, each taking every eighth head: a warp holds four
// tokens, and its store writes whole 64-byte runs of ids (eight adjacent
// heads of each token). Every lane finds its token's run and window itself,
// so after the one staging barrier no warp waits for another (the block-wide
// phases behind three barriers it replaces cost 862 instructions a warp at
// 12 cycles each, Nsight Compute on an H200). Measured on
// an H200 (docs/perf_notes.md, "The device hasher"): 8 lanes a token beat
// 2, 4 and 16, and three heads a lane unrolled beat one.
constexpr int kLanesPerToken = 8;
constexpr int kHeadsUnroll = 3;
constexpr int kTileTokens = kThreads / kLanesPerToken;
constexpr int kSharedRunsMax = 256;        // runs staged in shared memory; more are searched in global memory
constexpr int kSharedHeadsMax = 128;       // heads staged in shared memory; more are read from global memory
constexpr int kSharedHistoryWords = 1024;  // each history buffer staged when it holds at most this many ids
constexpr int kHistoryMax = kMaxHashOrder - 1;
constexpr int kHistoryWordsPerThread = 2 * kSharedHistoryWords / kThreads;
// The staging loads give each thread at most one run (and the one before),
// one token (of a tile and its halo) and one head.
static_assert(kSharedRunsMax <= kThreads && kTileTokens + kHistoryMax <= kThreads && kSharedHeadsMax <= kThreads);
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

// A run as the tile blocks stage it, in 32-bit words (a step holds fewer
// than 2^31 tokens): its first token clamped to [-1, token_count] (which
// keeps its order against every token of the step, for the binary search),
// its end and slot when it is good (by itself and after the run before),
// and whether it is. Deciding goodness while staging keeps it off every
// token's path.
struct StagedRun {
  int begin;
  int end;
  int slot;
  int good;
};

// The ids of a token's heads `g`, `g + kLanesPerToken`, ... (DEAD when
// `dead`), kHeadsUnroll at a time so their modulo chains interleave.
__device__ void write_ids(const DeviceHashHead* heads, int head_count, const int64_t* mixes, bool dead, int g,
                          int64_t* out) {
  for (int head0 = g; head0 < head_count; head0 += kLanesPerToken * kHeadsUnroll) {
#pragma unroll
    for (int u = 0; u < kHeadsUnroll; ++u) {
      const int head = head0 + u * kLanesPerToken;
      if (head >= head_count) break;
      int64_t id = kDeadId;
      if (!dead) {
        const DeviceHashHead h = heads[head];
        id = head_row(mixes[h.order - 1], h);
      }
      out[head] = id;
    }
  }
}

// Block 0 is the slot block: it checks every run (reporting the bad ones),
// writes each good run's new history (extend) or pending block (verify),
// and on an extend copies across the histories of the slots no good run
// advances. Every other block hashes a tile of tokens, kLanesPerToken lanes
// a token. No block waits for another: every block loads what it needs in
// one round trip (the step's header and runs, its tile of tokens with their
// lookback halo, the heads, both history buffers where they fit), then
// works from shared memory. Histories are double buffered by the step
// header's read buffer, which the host flips with each extend, so no block
// writes what another reads.
__global__ void __launch_bounds__(kThreads, 1) request_hash_kernel(RequestHashArgs a) {
  const RequestHashTable& t = a.table;
  __shared__ DeviceRunWords runs_s[kSharedRunsMax];     // the slot block's
  __shared__ StagedRun staged_runs_s[kSharedRunsMax];   // a tile block's
  __shared__ int64_t tokens_s[kTileTokens + kHistoryMax];  // bad tokens taken as DEAD
  __shared__ uint8_t bad_s[kTileTokens + kHistoryMax];
  __shared__ int64_t mixes_s[kTileTokens][kMaxHashOrder];   // [token][order - 1]
  __shared__ DeviceHashHead heads_s[kSharedHeadsMax];
  __shared__ int64_t history_s[2][kSharedHistoryWords];
  __shared__ uint32_t advanced_s[kMaxDeviceRequestSlots / 32];  // slots a good run advances
  __shared__ int64_t header_s[2];

  const int tid = static_cast<int>(threadIdx.x);
  const bool slot_block = blockIdx.x == 0;
  const int token_count = static_cast<int>(a.token_count);  // < 2^31 (request_hash)
  const int tile_begin = slot_block ? token_count : static_cast<int>(blockIdx.x - 1) * kTileTokens;
  const int tile_end = min(tile_begin + kTileTokens, token_count);
  const int length = t.max_order - 1;
  const int staged_begin = slot_block ? tile_end : max(tile_begin - length, 0);
  const int staged_runs = min(t.slot_count, kSharedRunsMax);
  const int history_words = t.slot_count * length;
  const bool histories_staged = history_words <= kSharedHistoryWords;
  const bool heads_staged = !slot_block && t.head_count <= kSharedHeadsMax;

  // One round trip: every global load of the block is issued into registers
  // before the first is stored to shared memory (a load-then-store loop per
  // array waits for each array in turn), and the stores are predicated, not
  // branched around, so the compiler keeps them after the loads. Each thread
  // holds at most one header word, a run and the run before it, one token,
  // one head and kHistoryWordsPerThread history words (the static_asserts
  // above the kernel).
  const int64_t header_v = tid < 2 ? a.header[tid] : 0;
  const bool run_staged = tid < staged_runs;
  DeviceRunWords run_v{}, before_v{};
  if (run_staged) run_v = a.runs[tid];
  if (run_staged && !slot_block && tid > 0) before_v = a.runs[tid - 1];
  const int staged_p = staged_begin + tid;
  const bool token_staged = staged_p < tile_end;
  const int64_t token_v = token_staged ? a.tokens[staged_p] : 0;
  const bool head_staged = heads_staged && tid < t.head_count;
  DeviceHashHead head_v{};
  if (head_staged) head_v = t.heads[tid];
  int64_t history_v[kHistoryWordsPerThread];
#pragma unroll
  for (int i = 0; i < kHistoryWordsPerThread; ++i) {
    const int w = tid + i * kThreads;
    history_v[i] = histories_staged && w < 2 * history_words ? t.histories[w] : 0;
  }
  if (tid < 2) header_s[tid] = header_v;
  if (run_staged && slot_block) runs_s[tid] = run_v;
  if (run_staged && !slot_block) {
    const bool good = run_alone_good(run_v, t.slot_count, a.token_count) &&
                      (tid == 0 || !run_alone_good(before_v, t.slot_count, a.token_count) ||
                       run_v.token_begin >= before_v.token_begin + before_v.token_count);
    const int64_t begin = run_v.token_begin < 0 ? -1 : min(run_v.token_begin, a.token_count);
    staged_runs_s[tid] = StagedRun{static_cast<int>(begin), good ? static_cast<int>(begin + run_v.token_count) : 0,
                                   good ? static_cast<int>(run_v.slot) : 0, good ? 1 : 0};
  }
  const bool bad_token = !in_vocabulary(token_v, t.compressed_vocab_size);
  if (token_staged) tokens_s[staged_p - staged_begin] = bad_token ? kDeadId : token_v;
  if (token_staged) bad_s[staged_p - staged_begin] = bad_token ? 1 : 0;
  if (head_staged) heads_s[tid] = head_v;
#pragma unroll
  for (int i = 0; i < kHistoryWordsPerThread; ++i) {
    const int w = tid + i * kThreads;
    // No division by history_words (one per word cost more than the hash).
    const bool staged = histories_staged && w < 2 * history_words;
    int64_t* to = w < history_words ? &history_s[0][w] : &history_s[1][w - history_words];
    if (staged) *to = history_v[i];
  }
  if (slot_block && !a.verify)
    for (int w = tid; w < (t.slot_count + 31) / 32; w += kThreads) advanced_s[w] = 0;
  __syncthreads();
  const int64_t run_count_read = header_s[0];
  const int run_count = run_count_read < 0 || run_count_read > t.slot_count ? 0 : static_cast<int>(run_count_read);
  const int read_buffer = header_s[1] != 0 ? 1 : 0;
  const int64_t* old_histories =
      histories_staged ? history_s[read_buffer] : t.histories + static_cast<int64_t>(read_buffer) * history_words;
  int64_t* new_histories = t.histories + static_cast<int64_t>(1 - read_buffer) * history_words;

  if (slot_block) {
    // A thread a run: check it, and for a good one write its pending block
    // (verify) or its new history (extend), reading the run's last tokens
    // from global memory (no tile holds them all).
    const DeviceRunWords* runs = run_count <= kSharedRunsMax ? runs_s : a.runs;
    for (int j = tid; j < run_count; j += kThreads) {
      const DeviceRunWords r = runs[j];
      const bool good = run_good(runs, j, t.slot_count, a.token_count);
      if (!good) note_error(t.error, DeviceHashErrorCode::kRun, static_cast<uint64_t>(j));
      if (a.verify && r.token_count > t.verify_tokens_max)
        note_error(t.error, DeviceHashErrorCode::kVerifyBlock, static_cast<uint64_t>(j));
      if (!good) continue;
      const auto token = [&](int64_t k) {
        const int64_t v = a.tokens[r.token_begin + k];
        return in_vocabulary(v, t.compressed_vocab_size) ? v : kDeadId;
      };
      if (a.verify) {
        if (r.token_count > t.verify_tokens_max) continue;
        int64_t* block = t.pending + r.slot * t.verify_tokens_max;
        for (int64_t k = 0; k < r.token_count; ++k) block[k] = token(k);
        t.pending_counts[r.slot] = r.token_count;
      } else {
        atomicOr(&advanced_s[r.slot / 32], 1u << (r.slot % 32));
        advance_history(t, old_histories + r.slot * length, new_histories + r.slot * length, r.token_count, token);
      }
    }
    if (run_count_read != run_count && tid == 0) note_error(t.error, DeviceHashErrorCode::kRunCount, 0);
    if (a.verify || length == 0) return;  // the whole block: a verify changes no history
    __syncthreads();
    for (int s = tid; s < t.slot_count; s += kThreads) {
      if ((advanced_s[s / 32] >> (s % 32) & 1u) != 0) continue;
      const int64_t* from = old_histories + static_cast<int64_t>(s) * length;
      int64_t* to = new_histories + static_cast<int64_t>(s) * length;
      for (int k = 0; k < length; ++k) to[k] = from[k];
    }
    return;
  }

  // kLanesPerToken lanes a token: each finds the token's run by binary
  // search and mixes its window (the tokens, and before the run's first
  // token the slot's history) for every order; the first lane keeps the
  // mixes for the others.
  const int lane = tid % 32;
  const int i = (tid / 32) * (32 / kLanesPerToken) + lane / kLanesPerToken;  // the token in the tile
  const int g = lane % kLanesPerToken;
  const int pos_t = tile_begin + i;
  const bool mine = pos_t < tile_end;
  const bool barrier = t.dead_token_rule != DeadTokenRule::kLiteral;
  bool dead = true;
  if (mine) {
    // The token's run: its begin, end and slot when it is good and holds the token.
    bool in_run = false;
    int begin = 0, slot = 0;
    if (run_count <= kSharedRunsMax) {
      int lo = 0, hi = run_count;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (staged_runs_s[mid].begin <= pos_t) lo = mid + 1;
        else hi = mid;
      }
      if (lo > 0) {
        const StagedRun r = staged_runs_s[lo - 1];
        in_run = r.good != 0 && pos_t < r.end;
        begin = r.begin;
        slot = r.slot;
      }
    } else {
      int lo = 0, hi = run_count;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (a.runs[mid].token_begin <= pos_t) lo = mid + 1;
        else hi = mid;
      }
      if (lo > 0 && run_good(a.runs, lo - 1, t.slot_count, a.token_count)) {
        const DeviceRunWords r = a.runs[lo - 1];
        in_run = pos_t < r.token_begin + r.token_count;
        begin = static_cast<int>(r.token_begin);
        slot = static_cast<int>(r.slot);
      }
    }
    if (in_run) {
      const int at = pos_t - staged_begin;
      const bool bad = bad_s[at] != 0;
      if (bad && g == 0) note_error(t.error, DeviceHashErrorCode::kToken, static_cast<uint64_t>(pos_t));
      const int64_t* history = old_histories + static_cast<int64_t>(slot) * length;
      bool blocked = false;
      int64_t mix = 0;
      // Unrolled to kMaxHashOrder: the multipliers stay kernel parameters
      // read at fixed offsets (a runtime index would copy them to local memory).
#pragma unroll
      for (int k = 0; k < kMaxHashOrder; ++k) {
        if (k >= t.max_order) break;
        const int pos = pos_t - k;
        int64_t w;
        if (blocked) {
          w = t.pad_id;
        } else if (pos >= begin) {
          w = tokens_s[pos - staged_begin];
          if (barrier && w == kDeadId) {
            blocked = true;
            w = t.pad_id;
          }
        } else {
          w = history[begin - pos - 1];
        }
        // Wrapping int64 products: the CPU's (no overflow for ids in the vocabulary).
        mix ^= static_cast<int64_t>(static_cast<uint64_t>(w) * static_cast<uint64_t>(t.multipliers[k]));
        if (g == 0) mixes_s[i][k] = mix;
      }
      dead = bad || (tokens_s[at] == kDeadId && t.dead_token_rule == DeadTokenRule::kBarrierNoRow);
    }
  }
  __syncwarp();
  if (!mine) return;
  // Two calls, not one through a pointer that may be either: the staged
  // heads are then read as shared memory, not through generic addresses.
  int64_t* out = a.row_ids + static_cast<int64_t>(pos_t) * t.head_count;
  if (heads_staged) write_ids(heads_s, t.head_count, mixes_s[i], dead, g, out);
  else write_ids(t.heads, t.head_count, mixes_s[i], dead, g, out);
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
  if (a.token_count > 0x7fffffff - kTileTokens)
    return invalid_argument(fmt::format("request_hash: {} tokens exceed one launch (at most {})", a.token_count,
                                        0x7fffffff - kTileTokens));
  // The slot block, then a block a tile of tokens.
  const int64_t blocks = 1 + (a.token_count + kTileTokens - 1) / kTileTokens;
  request_hash_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
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
