#include "core/model/hashing.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/base/splitmix64.h"

namespace engram {

int64_t hash_multiplier_bound(int64_t vocab_size) {
  ENGRAM_CHECK(vocab_size >= 2);
  return std::numeric_limits<int64_t>::max() / vocab_size;
}

std::vector<int64_t> hash_multipliers(const ModelSpec& spec, int table_index) {
  ENGRAM_CHECK(table_index >= 0 && table_index < static_cast<int>(spec.tables.size()));
  const int64_t bound = hash_multiplier_bound(spec.vocab_size);
  // Odd values 2q+1 with q < bound/2 stay below bound.
  const uint64_t half = static_cast<uint64_t>(bound / 2);
  ENGRAM_CHECK(half >= 1);
  uint64_t state = spec.seed + static_cast<uint64_t>(spec.tables[static_cast<size_t>(table_index)].layer_id);
  std::vector<int64_t> m(static_cast<size_t>(spec.max_order()));
  for (int64_t& value : m) {
    value = static_cast<int64_t>((splitmix64_next(state) % half) * 2 + 1);
    ENGRAM_CHECK(value > 0 && value < bound && (value & 1) == 1);
  }
  return m;
}

Result<TableHasher> TableHasher::create(const ModelSpec& spec, int table_index) {
  if (table_index < 0 || table_index >= static_cast<int>(spec.tables.size()))
    return invalid_argument(fmt::format("hashing: table index {} is out of range; the model has {} tables",
                                        table_index, spec.tables.size()));
  return with_multipliers(spec, table_index, hash_multipliers(spec, table_index));
}

Result<TableHasher> TableHasher::with_multipliers(const ModelSpec& spec, int table_index,
                                                  std::vector<int64_t> multipliers) {
  if (table_index < 0 || table_index >= static_cast<int>(spec.tables.size()))
    return invalid_argument(fmt::format("hashing: table index {} is out of range; the model has {} tables",
                                        table_index, spec.tables.size()));
  if (spec.vocab_size < 2)
    return invalid_argument(fmt::format("model.vocab_size: {} is too small; use at least 2", spec.vocab_size));
  const TableSpec& table = spec.tables[static_cast<size_t>(table_index)];
  TableHasher h;
  h.vocab_size_ = spec.vocab_size;
  for (int o : table.orders) h.max_order_ = std::max(h.max_order_, o);
  if (static_cast<int>(multipliers.size()) < h.max_order_)
    return invalid_argument(fmt::format("hashing: {} multipliers for max order {}; give one per lookback position",
                                        multipliers.size(), h.max_order_));
  const int64_t bound = hash_multiplier_bound(spec.vocab_size);
  for (size_t k = 0; k < multipliers.size(); ++k) {
    int64_t m = multipliers[k];
    if (m <= 0 || m >= bound || (m & 1) == 0)
      return invalid_argument(fmt::format(
          "hashing: multiplier m[{}] = {} must be odd, positive and below {} (INT64_MAX / vocab_size)", k, m,
          bound));
  }
  h.multipliers_ = std::move(multipliers);
  for (int head = 0; head < table.head_count(); ++head) {
    h.head_orders_.push_back(table.order_of_head(head));
    h.primes_.push_back(table.primes[static_cast<size_t>(head)]);
    h.offsets_.push_back(table.head_offset(head));
  }
  return h;
}

Status TableHasher::hash(std::span<const int64_t> tokens, std::span<const uint8_t> sequence_starts,
                         std::span<int64_t> row_ids) const {
  const size_t heads = primes_.size();
  if (!sequence_starts.empty() && sequence_starts.size() != tokens.size())
    return invalid_argument(fmt::format("hashing: {} sequence-start flags for {} tokens; give one per token or none",
                                        sequence_starts.size(), tokens.size()));
  if (row_ids.size() != tokens.size() * heads)
    return invalid_argument(fmt::format("hashing: row id buffer holds {} ids; {} tokens x {} heads need {}",
                                        row_ids.size(), tokens.size(), heads, tokens.size() * heads));
  for (size_t t = 0; t < tokens.size(); ++t) {
    int64_t c = tokens[t];
    if (c != kDeadId && (c < 0 || c >= vocab_size_))
      return invalid_argument(fmt::format("hashing: token {} has id {}, outside [0, {}) and not DEAD ({})", t, c,
                                          vocab_size_, kDeadId));
  }

  const int64_t pad = vocab_size_ - 1;
  std::vector<int64_t> window(static_cast<size_t>(max_order_));
  std::vector<int64_t> mix_by_order(static_cast<size_t>(max_order_) + 1);
  size_t sequence_begin = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (t == 0 || (!sequence_starts.empty() && sequence_starts[t] != 0)) sequence_begin = t;
    std::span<int64_t> out = row_ids.subspan(t * heads, heads);
    if (tokens[t] == kDeadId) {
      std::fill(out.begin(), out.end(), kDeadId);
      continue;
    }
    // Walk back; once blocked (sequence start passed or a DEAD met), pad.
    window[0] = tokens[t];
    bool blocked = false;
    for (size_t k = 1; k < window.size(); ++k) {
      if (!blocked && (k > t - sequence_begin || tokens[t - k] == kDeadId)) blocked = true;
      window[k] = blocked ? pad : tokens[t - k];
    }
    // mix_by_order[n] = XOR of the first n products.
    mix_by_order[0] = 0;
    for (size_t k = 0; k < window.size(); ++k) {
      ENGRAM_CHECK(window[k] >= 0 && window[k] < vocab_size_);
      int64_t product = window[k] * multipliers_[k];  // < vocab * bound <= INT64_MAX
      mix_by_order[k + 1] = mix_by_order[k] ^ product;
    }
    for (size_t head = 0; head < heads; ++head) {
      int64_t mix = mix_by_order[static_cast<size_t>(head_orders_[head])];
      ENGRAM_CHECK(mix >= 0);  // XOR of non-negative values keeps the sign bit clear
      int64_t row = mix % primes_[head] + offsets_[head];
      ENGRAM_CHECK(row >= offsets_[head] && row < offsets_[head] + primes_[head]);
      out[head] = row;
    }
  }
  return Status::ok();
}

}  // namespace engram
