// Engram hash ids: compressed token ids -> one row id per head per token
// (docs/design.md section 1), bit for bit as the Engram reference computes them
// (NgramHashMapping in deepseek-ai/Engram engram_demo_v1.py) and as the
// engines port it (vLLM vllm/models/deepseek_v4_1/common/engram.py, SGLang
// python/sglang/srt/layers/engram.py). tests/hashing_numpy_test.cc checks the
// multipliers and row ids against numpy.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/model/table_spec.h"

namespace engram {

// The multipliers are 2q + 1 with q drawn from [0, half_bound), half_bound =
// max(1, (INT64_MAX / compressed_vocab_size) / 2): odd, and small enough that
// a compressed id times one stays in int64.
int64_t hash_multiplier_half_bound(int64_t compressed_vocab_size);

// The multipliers of table `table_index`, one per lookback position
// (spec.max_order() of them): numpy's
//   default_rng(seed + 10007 * layer_id).integers(0, half_bound, size, dtype=int64) * 2 + 1.
std::vector<int64_t> hash_multipliers(const ModelSpec& spec, int table_index);

// Turns token ids into row ids for one table (one Engram layer).
//
// For token t the window holds w[k] = the id at t - k, k < max order; a
// position before the sequence start reads the pad id. DEAD tokens, by
// spec.dead_token_rule:
// - kBarrier: walking back from t (t itself included), the first DEAD met
//   and every earlier position read the pad id; a DEAD token hashes as the
//   all-pad n-gram (the engines read those rows and shut the token's gate).
// - kBarrierNoRow: the same lookback, but a DEAD token gets kDeadId for
//   every head, so it reads no row (a zero row: the engines' masked gate
//   leaves the residual as untouched as a zero value does).
// - kLiteral: -1 is an id like any other (the reference's compressor passes
//   negative ids through).
// Order n mixes w[0]*m[0] ^ ... ^ w[n-1]*m[n-1]; head j of order n gets
// floor(mix mod prime) (numpy's modulo: never negative) + the head's offset.
class TableHasher {
 public:
  static Result<TableHasher> create(const ModelSpec& spec, int table_index);
  // Explicit multipliers (hand-computed tests): each odd and positive, with
  // (compressed_vocab_size - 1) * m in int64; at least the table's max order.
  static Result<TableHasher> with_multipliers(const ModelSpec& spec, int table_index,
                                              std::vector<int64_t> multipliers);

  int head_count() const { return static_cast<int>(primes_.size()); }
  const std::vector<int64_t>& multipliers() const { return multipliers_; }
  // The facts a batch hasher on another device needs (kernels/request_hash.cu,
  // sim/): per head its order, prime and offset.
  int max_order() const { return max_order_; }
  int64_t pad_id() const { return pad_id_; }
  int64_t compressed_vocab_size() const { return compressed_vocab_size_; }
  DeadTokenRule dead_token_rule() const { return dead_token_rule_; }
  const std::vector<int>& head_orders() const { return head_orders_; }
  const std::vector<int64_t>& primes() const { return primes_; }
  const std::vector<int64_t>& offsets() const { return offsets_; }

  // How many earlier positions an n-gram reads: max order - 1. A history
  // holds that many ids, newest first, each the id the lookback reads there
  // (pad where the sequence had not begun or a DEAD barrier cut it).
  int history_length() const { return max_order_ - 1; }
  // A history at a sequence start: every position pad.
  std::vector<int64_t> empty_history() const;

  // Checks one token: in [0, compressed_vocab_size) or kDeadId. `where`
  // names the field for the error ("tokens[17] (request 2)").
  Status check_token(int64_t token, std::string_view where) const;
  // The test check_token makes, without building the message: callers test
  // every token with this and format `where` only for a bad one.
  bool token_in_vocabulary(int64_t token) const {
    return token == kDeadId || (token >= 0 && token < compressed_vocab_size_);
  }

  // Hashes tokens that continue `history` (history_length() ids) into
  // row_ids (tokens.size() * head_count()) and leaves in `history` what
  // follows the last token. The one per-token rule: hash() and the request
  // hasher (core/model/request_hasher.h) both run it. Tokens unchecked:
  // callers check them first, so a refused batch changes nothing.
  void hash_run(std::span<int64_t> history, std::span<const int64_t> tokens, std::span<int64_t> row_ids) const;
  // The history after `tokens`, without hashing them (a commit, a prefix).
  void advance(std::span<int64_t> history, std::span<const int64_t> tokens) const;

  // tokens: ids in [0, compressed_vocab_size) or kDeadId. sequence_starts:
  // empty (the tokens are one sequence) or one flag per token, nonzero where
  // a new sequence begins (token 0 always begins one). row_ids:
  // tokens.size() * head_count() entries, [token][head].
  Status hash(std::span<const int64_t> tokens, std::span<const uint8_t> sequence_starts,
              std::span<int64_t> row_ids) const;

 private:
  TableHasher() = default;

  int64_t compressed_vocab_size_ = 0;
  int64_t pad_id_ = 0;
  DeadTokenRule dead_token_rule_ = DeadTokenRule::kBarrier;
  int max_order_ = 0;
  std::vector<int> head_orders_;
  std::vector<int64_t> primes_;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> multipliers_;
};

}  // namespace engram
