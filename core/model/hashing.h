// Engram hash ids: compressed token ids -> one row id per head per token
// (DESIGN.md section 1). Deterministic across runs and platforms: the
// multipliers come from splitmix64 seeded by (model seed + layer id), and the
// arithmetic is plain int64 that cannot overflow.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/model/table_spec.h"

namespace engram {

// Multipliers are odd, positive and below this bound, so c * m with
// c < vocab_size never overflows int64.
int64_t hash_multiplier_bound(int64_t vocab_size);

// The multipliers of table `table_index` (one per lookback position,
// spec.max_order() of them), drawn from splitmix64(spec.seed + layer_id).
std::vector<int64_t> hash_multipliers(const ModelSpec& spec, int table_index);

// Turns token ids into row ids for one table (one Engram layer).
//
// For token t and order n the mix is c[t]*m[0] ^ c[t-1]*m[1] ^ ... ^
// c[t-n+1]*m[n-1]. Lookback stops at the sequence start and at a DEAD token:
// walking back from t, the first DEAD met (or the first position before the
// sequence start) and every earlier position read as the pad id
// (vocab_size - 1). Head j of order n gets mix % prime + head offset. A DEAD
// token itself yields kDeadId for every head.
class TableHasher {
 public:
  static Result<TableHasher> create(const ModelSpec& spec, int table_index);
  // Explicit multipliers (hand-computed tests); each must be odd, positive and
  // below hash_multiplier_bound(vocab_size); at least the table's max order.
  static Result<TableHasher> with_multipliers(const ModelSpec& spec, int table_index,
                                              std::vector<int64_t> multipliers);

  int head_count() const { return static_cast<int>(primes_.size()); }
  const std::vector<int64_t>& multipliers() const { return multipliers_; }

  // tokens: ids in [0, vocab_size) or kDeadId. sequence_starts: empty (the
  // tokens are one sequence) or one flag per token, nonzero where a new
  // sequence begins (token 0 always begins one). row_ids: tokens.size() *
  // head_count() entries, [token][head].
  Status hash(std::span<const int64_t> tokens, std::span<const uint8_t> sequence_starts,
              std::span<int64_t> row_ids) const;

 private:
  TableHasher() = default;

  int64_t vocab_size_ = 0;
  int max_order_ = 0;
  std::vector<int> head_orders_;
  std::vector<int64_t> primes_;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> multipliers_;
};

}  // namespace engram
