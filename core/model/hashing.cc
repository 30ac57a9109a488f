#include "core/model/hashing.h"

#include <climits>
#include <cstdint>
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/model/numpy_random.h"

namespace engram {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// The reference's per-layer seed stride (PRIME_1 in NgramHashMapping).
constexpr uint64_t kLayerSeedStride = 10007;

// numpy's % on int64: the sign of the divisor, so never negative here.
int64_t floor_mod(int64_t value, int64_t modulus) {
  const int64_t r = value % modulus;
  return r < 0 ? r + modulus : r;
}

}  // namespace

int64_t hash_multiplier_half_bound(int64_t compressed_vocab_size) {
  ENGRAM_CHECK(compressed_vocab_size >= 1);
  return std::max<int64_t>(1, (kInt64Max / compressed_vocab_size) / 2);
}

std::vector<int64_t> hash_multipliers(const ModelSpec& spec, int table_index) {
  ENGRAM_CHECK(table_index >= 0 && table_index < static_cast<int>(spec.tables.size()));
  const int layer_id = spec.tables[static_cast<size_t>(table_index)].layer_id;
  ENGRAM_CHECK(layer_id >= 0);  // validate() refuses negative layer ids: numpy's seed must be >= 0
  // Python adds without wrapping: 128 bits hold any uint64 seed plus the stride term.
  const numpy_random::uint128 entropy =
      static_cast<numpy_random::uint128>(spec.seed) + static_cast<numpy_random::uint128>(kLayerSeedStride) *
                                                          static_cast<numpy_random::uint128>(layer_id);
  numpy_random::Pcg64 generator(entropy);
  const int64_t half_bound = hash_multiplier_half_bound(spec.compressed_vocab_size);
  std::vector<int64_t> m = numpy_random::bounded_int64(generator, 0, half_bound, static_cast<size_t>(spec.max_order()),
                                                       numpy_random::BoundedMethod::kLemire);
  for (int64_t& value : m) {
    value = value * 2 + 1;  // < 2 * half_bound <= INT64_MAX / compressed_vocab_size, or 1
    ENGRAM_CHECK(value > 0 && (value & 1) == 1);
  }
  return m;
}

Result<TableHasher> TableHasher::create(const ModelSpec& spec, int table_index) {
  if (table_index < 0 || table_index >= static_cast<int>(spec.tables.size()))
    return invalid_argument(fmt::format("hashing: table index {} is out of range; the model has {} tables",
                                        table_index, spec.tables.size()));
  ENGRAM_RETURN_IF_ERROR(validate(spec));
  return with_multipliers(spec, table_index, hash_multipliers(spec, table_index));
}

Result<TableHasher> TableHasher::with_multipliers(const ModelSpec& spec, int table_index,
                                                  std::vector<int64_t> multipliers) {
  if (table_index < 0 || table_index >= static_cast<int>(spec.tables.size()))
    return invalid_argument(fmt::format("hashing: table index {} is out of range; the model has {} tables",
                                        table_index, spec.tables.size()));
  ENGRAM_RETURN_IF_ERROR(validate(spec));
  const TableSpec& table = spec.tables[static_cast<size_t>(table_index)];
  TableHasher h;
  h.compressed_vocab_size_ = spec.compressed_vocab_size;
  h.pad_id_ = spec.pad_id;
  h.dead_token_rule_ = spec.dead_token_rule;
  for (int o : table.orders) h.max_order_ = std::max(h.max_order_, o);
  if (static_cast<int>(multipliers.size()) < h.max_order_)
    return invalid_argument(fmt::format("hashing: {} multipliers for max order {}; give one per lookback position",
                                        multipliers.size(), h.max_order_));
  // Every product of an id in [-1, compressed_vocab_size) stays in int64.
  const int64_t largest = kInt64Max / std::max<int64_t>(1, spec.compressed_vocab_size - 1);
  for (size_t k = 0; k < multipliers.size(); ++k) {
    const int64_t m = multipliers[k];
    if (m <= 0 || m > largest || (m & 1) == 0)
      return invalid_argument(fmt::format(
          "hashing: multiplier m[{}] = {} must be odd, positive and at most {} (INT64_MAX / (compressed_vocab_size - 1))",
          k, m, largest));
  }
  h.multipliers_ = std::move(multipliers);
  for (int head = 0; head < table.head_count(); ++head) {
    h.head_orders_.push_back(table.order_of_head(head));
    h.primes_.push_back(table.primes[static_cast<size_t>(head)]);
    h.offsets_.push_back(table.head_offset(head));
  }
  return h;
}

std::vector<int64_t> TableHasher::empty_history() const {
  return std::vector<int64_t>(static_cast<size_t>(history_length()), pad_id_);
}

Status TableHasher::check_token(int64_t token, std::string_view where) const {
  if (!token_in_vocabulary(token))
    return invalid_argument(fmt::format(
        "hashing: {} has id {}, outside the compressed vocabulary [0, {}) and not DEAD ({}); compress token ids "
        "with the model's tokenizer map first",
        where, token, compressed_vocab_size_, kDeadId));
  return Status::ok();
}

void TableHasher::advance(std::span<int64_t> history, std::span<const int64_t> tokens) const {
  ENGRAM_CHECK(static_cast<int>(history.size()) == history_length());
  if (history.empty()) return;
  const bool barrier = dead_token_rule_ != DeadTokenRule::kLiteral;
  for (const int64_t c : tokens) {
    if (barrier && c == kDeadId) {
      // The DEAD and everything behind it read pad from here on.
      std::fill(history.begin(), history.end(), pad_id_);
      continue;
    }
    for (size_t k = history.size() - 1; k > 0; --k) history[k] = history[k - 1];
    history[0] = c;
  }
}

void TableHasher::hash_run(std::span<int64_t> history, std::span<const int64_t> tokens,
                           std::span<int64_t> row_ids) const {
  const size_t heads = primes_.size();
  ENGRAM_CHECK(static_cast<int>(history.size()) == history_length());
  ENGRAM_CHECK(row_ids.size() == tokens.size() * heads);
  const bool barrier = dead_token_rule_ != DeadTokenRule::kLiteral;
  // mix_by_order[n] = XOR of the first n products of the window
  // [c, history[0], history[1], ...].
  int64_t mix_by_order[kMaxHashOrder + 1];
  ENGRAM_CHECK(max_order_ <= kMaxHashOrder);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int64_t c = tokens[t];
    std::span<int64_t> out = row_ids.subspan(t * heads, heads);
    const bool dead_barrier = barrier && c == kDeadId;
    if (dead_barrier && dead_token_rule_ == DeadTokenRule::kBarrierNoRow) {
      std::fill(out.begin(), out.end(), kDeadId);
    } else {
      mix_by_order[0] = 0;
      for (int k = 0; k < max_order_; ++k) {
        // A DEAD under a barrier reads pad at t and behind it.
        const int64_t w = dead_barrier ? pad_id_ : (k == 0 ? c : history[static_cast<size_t>(k - 1)]);
        ENGRAM_CHECK(w >= kDeadId && w < compressed_vocab_size_);
        mix_by_order[k + 1] = mix_by_order[k] ^ (w * multipliers_[static_cast<size_t>(k)]);  // no overflow: see with_multipliers
      }
      for (size_t head = 0; head < heads; ++head) {
        const int64_t mix = mix_by_order[head_orders_[head]];
        // Without literal DEAD ids every product, so every mix, is non-negative.
        ENGRAM_CHECK(mix >= 0 || dead_token_rule_ == DeadTokenRule::kLiteral);
        const int64_t row = floor_mod(mix, primes_[head]) + offsets_[head];
        ENGRAM_CHECK(row >= offsets_[head] && row < offsets_[head] + primes_[head]);
        out[head] = row;
      }
    }
    advance(history, tokens.subspan(t, 1));
  }
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
  for (size_t t = 0; t < tokens.size(); ++t)
    if (!token_in_vocabulary(tokens[t])) return check_token(tokens[t], fmt::format("token {}", t));

  std::vector<int64_t> history = empty_history();
  size_t begin = 0;
  while (begin < tokens.size()) {
    size_t end = begin + 1;
    while (end < tokens.size() && (sequence_starts.empty() || sequence_starts[end] == 0)) ++end;
    std::fill(history.begin(), history.end(), pad_id_);
    hash_run(history, tokens.subspan(begin, end - begin), row_ids.subspan(begin * heads, (end - begin) * heads));
    begin = end;
  }
  return Status::ok();
}

}  // namespace engram
