#include "kernels/request_hash.h"

#include <fmt/format.h>

#include "kernels/gather_launch.h"

namespace engram::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kIdsPerBlock = 1024;    // a tile's ids: tokens per block = this / heads (1..kThreads)
constexpr int kSharedRunsMax = 512;   // runs staged in shared memory; a step with more searches global memory
constexpr int kHistoryMax = kMaxHashOrder - 1;

__device__ bool in_vocabulary(int64_t v, int64_t vocab) { return v == kDeadId || (v >= 0 && v < vocab); }

__device__ void note_error(uint64_t* error, DeviceHashErrorCode code, uint64_t index) {
  atomicMin(reinterpret_cast<unsigned long long*>(error), static_cast<unsigned long long>(device_hash_error(code, index)));
}

__device__ uint64_t read_error(uint64_t* error) {
  return atomicOr(reinterpret_cast<unsigned long long*>(error), 0ull);
}

// `history` (max_order - 1 ids, newest first) after `block` (count tokens):
// TableHasher::advance, one thread per slot.
__device__ void advance_history(const RequestHashTable& t, int64_t* history, const int64_t* block, int64_t count) {
  const int length = t.max_order - 1;
  const bool barrier = t.dead_token_rule != DeadTokenRule::kLiteral;
  int64_t old[kHistoryMax > 0 ? kHistoryMax : 1];
  for (int k = 0; k < length; ++k) old[k] = history[k];
  bool blocked = false;
  for (int k = 0; k < length; ++k) {
    const int64_t pos = count - 1 - k;
    int64_t v;
    if (blocked) {
      v = t.pad_id;
    } else if (pos >= 0) {
      v = block[pos];
      if (barrier && v == kDeadId) {
        blocked = true;
        v = t.pad_id;
      }
    } else {
      v = old[k - count];
    }
    history[k] = v;
  }
}

// A run by itself: a real slot, at least one token, inside the tokens.
__device__ bool run_is_good(const DeviceRunWords& r, int slot_count, int64_t token_count) {
  return r.slot >= 0 && r.slot < slot_count && r.token_count >= 1 && r.token_begin >= 0 &&
         r.token_begin <= token_count && r.token_count <= token_count - r.token_begin;
}

__global__ void __launch_bounds__(kThreads) request_hash_kernel(RequestHashArgs a, int tile_tokens) {
  const RequestHashTable& t = a.table;
  __shared__ DeviceRunWords runs_s[kSharedRunsMax];
  __shared__ int64_t tokens_s[kThreads + kHistoryMax];
  __shared__ int64_t mixes_s[kThreads][kMaxHashOrder];  // [token][order - 1]
  __shared__ uint8_t dead_s[kThreads];
  __shared__ int64_t run_count_s;
  __shared__ uint64_t sticky_error_s;
  __shared__ int bad_token_s;   // this block hashed a token outside the vocabulary
  __shared__ int bad_run_s;     // the last block: a run (or the run count) is bad
  __shared__ bool last_s, any_bad_token_s;

  const int tid = static_cast<int>(threadIdx.x);
  const int64_t tile_begin = static_cast<int64_t>(blockIdx.x) * tile_tokens;
  const int64_t tile_end = min(tile_begin + tile_tokens, a.token_count);
  const int halo = t.max_order - 1;
  const int64_t staged_begin = tile_begin > halo ? tile_begin - halo : 0;

  // One round trip: the run count, the runs (as many as a step may have,
  // up to the shared capacity) and the tile's tokens with their halo.
  if (tid == 0) {
    run_count_s = *a.run_count;
    sticky_error_s = *t.error;  // written before this launch (an earlier step, or the host)
    bad_token_s = 0;
    bad_run_s = 0;
  }
  const int staged_runs = min(t.slot_count, kSharedRunsMax);
  for (int j = tid; j < staged_runs; j += kThreads) runs_s[j] = a.runs[j];
  for (int64_t p = staged_begin + tid; p < tile_end; p += kThreads) tokens_s[p - staged_begin] = a.tokens[p];
  __syncthreads();
  const int64_t run_count_read = run_count_s;
  const int64_t run_count = run_count_read < 0 || run_count_read > t.slot_count ? 0 : run_count_read;
  const DeviceRunWords* runs = run_count <= kSharedRunsMax ? runs_s : a.runs;
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
    if (lo > 0) {
      const DeviceRunWords r = runs[lo - 1];
      if (run_is_good(r, t.slot_count, a.token_count) && pos_t < r.token_begin + r.token_count) {
        const int64_t c = tokens_s[pos_t - staged_begin];
        bool bad = !in_vocabulary(c, t.compressed_vocab_size);
        if (bad) {
          note_error(t.error, DeviceHashErrorCode::kToken, static_cast<uint64_t>(pos_t));
          bad_token_s = 1;
        }
        const int64_t* history = t.histories + r.slot * halo;
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
            } else if (!in_vocabulary(w, t.compressed_vocab_size)) {
              bad = true;
              w = 0;
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
  __syncthreads();

  // A thread per (token, head): coalesced ids.
  // 32-bit indices: a tile holds at most kThreads x heads ids (a 64-bit
  // division would cost more than the hash).
  const int tile_ids = static_cast<int>(tile_end - tile_begin) * t.head_count;
  int64_t* out = a.row_ids + tile_begin * t.head_count;
  for (int idx = tid; idx < tile_ids; idx += kThreads) {
    const int i = idx / t.head_count;
    const int head = idx - i * t.head_count;
    if (dead_s[i] != 0) {
      out[idx] = kDeadId;
      continue;
    }
    const DeviceHashHead h = t.heads[head];
    out[idx] = head_row(mixes_s[i][h.order - 1], h);
  }

  // The last block to finish: every block has read its histories (each
  // load's value was used before the barrier), so the step's runs may
  // change them now. The ticket carries, above its 32-bit block count, how
  // many blocks hashed a bad token: one atomic tells the last block both,
  // with no fence and no second read of the error word.
  __syncthreads();
  if (tid == 0) {
    const unsigned long long old = atomicAdd(reinterpret_cast<unsigned long long*>(t.blocks_done),
                                             1ull + (bad_token_s != 0 ? (1ull << 32) : 0ull));
    last_s = (old & 0xffffffffull) == gridDim.x - 1;
    any_bad_token_s = (old >> 32) != 0 || bad_token_s != 0;
  }
  __syncthreads();
  if (!last_s) return;
  if (tid == 0) {
    *t.blocks_done = 0;
    if (run_count_read != run_count) {
      note_error(t.error, DeviceHashErrorCode::kRunCount, 0);
      bad_run_s = 1;
    }
  }
  for (int64_t j = tid; j < run_count; j += kThreads) {
    const DeviceRunWords r = runs[j];
    // After the run before it (when that one is good by itself: it is flagged otherwise).
    bool good = run_is_good(r, t.slot_count, a.token_count);
    if (j > 0) {
      const DeviceRunWords before = runs[j - 1];
      good &= !run_is_good(before, t.slot_count, a.token_count) || r.token_begin >= before.token_begin + before.token_count;
    }
    if (!good) {
      note_error(t.error, DeviceHashErrorCode::kRun, static_cast<uint64_t>(j));
      bad_run_s = 1;
    }
    if (a.verify && r.token_count > t.verify_tokens_max) {
      note_error(t.error, DeviceHashErrorCode::kVerifyBlock, static_cast<uint64_t>(j));
      bad_run_s = 1;
    }
  }
  __syncthreads();
  if (sticky_error_s != kNoDeviceHashError || any_bad_token_s || bad_run_s != 0) return;
  for (int64_t j = tid; j < run_count; j += kThreads) {
    const DeviceRunWords r = runs[j];
    if (a.verify) {
      int64_t* block = t.pending + r.slot * t.verify_tokens_max;
      for (int64_t k = 0; k < r.token_count; ++k) block[k] = a.tokens[r.token_begin + k];
      t.pending_counts[r.slot] = r.token_count;
    } else {
      advance_history(t, t.histories + r.slot * halo, a.tokens + r.token_begin, r.token_count);
    }
  }
}

__global__ void __launch_bounds__(kThreads) request_commit_kernel(RequestCommitArgs a) {
  const RequestHashTable& t = a.table;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t count = *a.commit_count;
  if (count < 0 || count > t.slot_count) {
    if (tid == 0) note_error(t.error, DeviceHashErrorCode::kCommitCount, 0);
    return;
  }
  for (int64_t j = tid; j < count; j += kThreads) {
    const DeviceCommitWords c = a.commits[j];
    const bool slot_ok = c.slot >= 0 && c.slot < t.slot_count;
    const int64_t held = slot_ok ? t.pending_counts[c.slot] : 0;
    if (!slot_ok || held < 1 || held > t.verify_tokens_max || c.accepted_drafts < 0 || c.accepted_drafts > held - 1)
      note_error(t.error, DeviceHashErrorCode::kCommit, static_cast<uint64_t>(j));
  }
  __syncthreads();
  if (read_error(t.error) != kNoDeviceHashError) return;
  for (int64_t j = tid; j < count; j += kThreads) {
    const DeviceCommitWords c = a.commits[j];
    advance_history(t, t.histories + c.slot * (t.max_order - 1), t.pending + c.slot * t.verify_tokens_max,
                    c.accepted_drafts + 1);
    t.pending_counts[c.slot] = 0;
  }
}

Status check_table(const RequestHashTable& t, const char* kernel) {
  if (t.heads == nullptr || t.histories == nullptr || t.pending == nullptr || t.pending_counts == nullptr ||
      t.error == nullptr || t.blocks_done == nullptr)
    return invalid_argument(fmt::format("{}: heads, histories, pending, pending_counts, error and blocks_done must be "
                                        "device pointers, not null", kernel));
  if (t.head_count < 1 || t.max_order < 1 || t.max_order > kMaxHashOrder || t.slot_count < 1 ||
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
  if (a.token_count < 0 || a.run_count == nullptr || a.runs == nullptr ||
      (a.token_count > 0 && (a.tokens == nullptr || a.row_ids == nullptr)))
    return invalid_argument(fmt::format("request_hash: token_count {} must be >= 0 and run_count, runs, tokens and "
                                        "row_ids device pointers", a.token_count));
  const int tile_tokens = std::max(1, std::min(kThreads, kIdsPerBlock / a.table.head_count));
  // At least one block: its last-block step checks the runs and changes the histories.
  const int64_t blocks = std::max<int64_t>(1, (a.token_count + tile_tokens - 1) / tile_tokens);
  if (blocks > 0x7fffffff) return invalid_argument(fmt::format("request_hash: {} tokens exceed one launch", a.token_count));
  request_hash_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, tile_tokens);
  return detail::launch_status("request_hash");
}

Status request_commit(const RequestCommitArgs& a, cudaStream_t stream) {
  ENGRAM_RETURN_IF_ERROR(check_table(a.table, "request_commit"));
  if (a.commit_count == nullptr || a.commits == nullptr)
    return invalid_argument("request_commit: commit_count and commits must be device pointers, not null");
  request_commit_kernel<<<1, kThreads, 0, stream>>>(a);
  return detail::launch_status("request_commit");
}

}  // namespace engram::kernels
