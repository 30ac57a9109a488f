#include "core/model/table_spec.h"
#include "core/base/text_excerpt.h"
#include "core/model/model_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <span>
#include <unordered_set>

namespace engram {

namespace {

uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

uint64_t pow_mod(uint64_t base, uint64_t exponent, uint64_t m) {
  uint64_t result = 1;
  base %= m;
  for (; exponent > 0; exponent >>= 1) {
    if (exponent & 1) result = mul_mod(result, base, m);
    base = mul_mod(base, base, m);
  }
  return result;
}

}  // namespace

// Miller-Rabin with the first twelve primes as bases: exact for every n
// below 3.3 * 10^24, so for all of int64, in microseconds even near 2^63
// (trial division there took minutes).
bool is_prime(int64_t n) {
  if (n < 2) return false;
  constexpr uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  const auto u = static_cast<uint64_t>(n);
  for (uint64_t p : kBases) {
    if (u % p == 0) return u == p;
  }
  uint64_t d = u - 1;
  int twos = 0;
  for (; d % 2 == 0; d /= 2) ++twos;
  for (uint64_t a : kBases) {
    uint64_t x = pow_mod(a, d, u);
    if (x == 1 || x == u - 1) continue;
    bool composite = true;
    for (int r = 1; r < twos && composite; ++r) {
      x = mul_mod(x, x, u);
      composite = x != u - 1;
    }
    if (composite) return false;
  }
  return true;
}

int64_t TableSpec::row_count() const {
  int64_t rows = 0;
  for (int64_t p : primes) rows += p;
  return rows;
}

int64_t TableSpec::head_offset(int head) const {
  ENGRAM_CHECK(head >= 0 && head <= head_count());
  int64_t offset = 0;
  for (int h = 0; h < head; ++h) offset += primes[static_cast<size_t>(h)];
  return offset;
}

uint64_t TableSpec::row_bytes() const {
  switch (row_format) {
    case RowFormat::kFp8E4M3Ue8m0: return static_cast<uint64_t>(dim) + static_cast<uint64_t>(dim / kScaleBlock);
    case RowFormat::kBf16: return static_cast<uint64_t>(dim) * 2;
  }
  return 0;
}

uint64_t ModelSpec::table_bytes_total() const {
  uint64_t total = 0;
  for (const TableSpec& t : tables) total += t.table_bytes();
  return total;
}

int ModelSpec::max_order() const {
  int order = 1;
  for (const TableSpec& t : tables)
    for (int o : t.orders) order = std::max(order, o);
  return order;
}

std::vector<std::vector<int64_t>> draw_primes(const std::vector<int64_t>& engram_vocab_size_per_order, int layer_count,
                                              int heads_per_order) {
  std::unordered_set<int64_t> used;
  std::vector<std::vector<int64_t>> per_layer(static_cast<size_t>(layer_count));
  for (int layer = 0; layer < layer_count; ++layer) {
    for (const int64_t engram_vocab_size : engram_vocab_size_per_order) {
      ENGRAM_CHECK(engram_vocab_size >= 2 && engram_vocab_size <= kMaxEngramVocabSize);
      int64_t candidate = engram_vocab_size - 1;  // each order restarts here
      for (int head = 0; head < heads_per_order; ++head) {
        do {
          ++candidate;
        } while (!is_prime(candidate) || used.count(candidate) != 0);
        used.insert(candidate);
        per_layer[static_cast<size_t>(layer)].push_back(candidate);
      }
    }
  }
  return per_layer;
}

std::vector<std::vector<int64_t>> draw_primes(int64_t engram_vocab_size, int layer_count, int order_count,
                                              int heads_per_order) {
  const std::vector<int64_t> per_order(static_cast<size_t>(order_count), engram_vocab_size);
  return draw_primes(per_order, layer_count, heads_per_order);
}

std::string_view scale_byte_rule_name(ScaleByteRule rule) {
  switch (rule) {
    case ScaleByteRule::kVllm: return "vllm";
    case ScaleByteRule::kSglang: return "sglang";
    case ScaleByteRule::kSglangTorch: return "sglang_torch";
  }
  return "?";
}

std::string_view minus_zero_rule_name(MinusZeroRule rule) {
  switch (rule) {
    case MinusZeroRule::kWritePlusZero: return "plus_zero";
    case MinusZeroRule::kKeep: return "keep";
  }
  return "?";
}

std::string_view dead_token_rule_name(DeadTokenRule rule) {
  switch (rule) {
    case DeadTokenRule::kBarrier: return "barrier";
    case DeadTokenRule::kBarrierNoRow: return "barrier_no_row";
    case DeadTokenRule::kLiteral: return "literal";
  }
  return "?";
}

std::optional<DeadTokenRule> parse_dead_token_rule(std::string_view text) {
  for (DeadTokenRule rule : {DeadTokenRule::kBarrier, DeadTokenRule::kBarrierNoRow, DeadTokenRule::kLiteral})
    if (text == dead_token_rule_name(rule)) return rule;
  return std::nullopt;
}

Result<ModelSpec> make_model_spec(std::string name, int64_t engram_vocab_size, std::vector<int> layer_ids,
                                  std::vector<int> orders, int heads_per_order, RowFormat format,
                                  int dim, uint64_t seed) {
  const std::vector<int64_t> per_order(orders.size(), engram_vocab_size);
  return make_model_spec(std::move(name), per_order, std::move(layer_ids), std::move(orders), heads_per_order, format,
                         dim, seed);
}

Result<ModelSpec> make_model_spec(std::string name, std::vector<int64_t> engram_vocab_size_per_order,
                                  std::vector<int> layer_ids, std::vector<int> orders, int heads_per_order,
                                  RowFormat format, int dim, uint64_t seed) {
  ModelSpec spec;
  spec.name = std::move(name);
  spec.engram_vocab_size = engram_vocab_size_per_order.empty() ? 0 : engram_vocab_size_per_order.front();
  spec.engram_vocab_size_per_order = engram_vocab_size_per_order;
  spec.compressed_vocab_size = spec.engram_vocab_size;
  spec.pad_id = 0;
  spec.dead_token_rule = DeadTokenRule::kBarrier;
  spec.seed = seed;
  // Bounds first: the prime search below must end fast for anything accepted.
  if (orders.empty())
    return invalid_argument("model.orders: empty; give at least one n-gram order, e.g. [2, 3, 4]");
  if (engram_vocab_size_per_order.size() != orders.size())
    return invalid_argument(fmt::format("model.engram_vocab_size: {} sizes for {} n-gram orders; give one size, or "
                                        "one per order",
                                        engram_vocab_size_per_order.size(), orders.size()));
  for (int64_t v : engram_vocab_size_per_order) {
    if (v < 2 || v > kMaxEngramVocabSize)
      return invalid_argument(fmt::format("model.engram_vocab_size: {} is out of range; it must be 2..{} (2^40: the "
                                          "rows of one head)",
                                          v, kMaxEngramVocabSize));
  }
  if (heads_per_order < 1 || heads_per_order > kMaxHeadsPerOrder)
    return invalid_argument(fmt::format("model.heads_per_order: {} is out of range; it must be 1..{}", heads_per_order,
                                        kMaxHeadsPerOrder));
  if (layer_ids.empty()) return invalid_argument("model.layers: empty; give at least one Engram layer id");
  if (layer_ids.size() > static_cast<size_t>(kMaxEngramLayers))
    return invalid_argument(fmt::format("model.layers: {} layers; at most {} are accepted", layer_ids.size(),
                                        kMaxEngramLayers));
  for (int o : orders)
    if (o < 1 || o > kMaxHashOrder)
      return invalid_argument(fmt::format("model.orders: {} is out of range; n-gram orders are 1..8", o));
  auto primes = draw_primes(engram_vocab_size_per_order, static_cast<int>(layer_ids.size()), heads_per_order);
  for (size_t i = 0; i < layer_ids.size(); ++i) {
    TableSpec t;
    t.layer_id = layer_ids[i];
    t.orders = orders;
    t.heads_per_order = heads_per_order;
    t.primes = primes[i];
    t.row_format = format;
    t.dim = dim;
    spec.tables.push_back(std::move(t));
  }
  ENGRAM_RETURN_IF_ERROR(validate(spec));
  return spec;
}

Status validate(const ModelSpec& spec) {
  if (spec.tables.empty()) return invalid_argument("model.layers: empty; give at least one Engram layer id");
  for (size_t i = 0; i < spec.tables.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (spec.tables[j].layer_id == spec.tables[i].layer_id)
        return invalid_argument(fmt::format("model.layers: layer id {} is given twice; each Engram layer once",
                                            spec.tables[i].layer_id));
  }
  for (const TableSpec& t : spec.tables) {
    if (t.layer_id > kMaxLayerId)
      return invalid_argument(fmt::format("model.layers: layer id {} is out of range; layer ids are 0..{}", t.layer_id,
                                          kMaxLayerId));
    for (size_t i = 0; i < t.orders.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (t.orders[i] == t.orders[j])
          return invalid_argument(fmt::format("model.orders: order {} is given twice; each n-gram order once",
                                              t.orders[i]));
    if (t.dim > kMaxRowDim)
      return invalid_argument(fmt::format("model.dim: {} is out of range; rows hold at most {} values", t.dim,
                                          kMaxRowDim));
    // The multipliers' numpy seed is seed + 10007 * layer_id, which numpy
    // requires to be non-negative.
    if (t.layer_id < 0)
      return invalid_argument(fmt::format("model.layers: layer id {} is negative; layer ids count from 0", t.layer_id));
    for (int o : t.orders)
      if (o < 1 || o > kMaxHashOrder)
        return invalid_argument(fmt::format("model.orders: {} is out of range; n-gram orders are 1..8", o));
    if (t.dim <= 0)
      return invalid_argument(fmt::format("model.dim: {} must be positive", t.dim));
    if (t.row_format == RowFormat::kFp8E4M3Ue8m0 && t.dim % kScaleBlock != 0)
      return invalid_argument(fmt::format(
          "model.dim: {} is not a multiple of {}; FP8 rows carry one UE8M0 scale per {} values", t.dim,
          kScaleBlock, kScaleBlock));
    if (static_cast<int>(t.primes.size()) != static_cast<int>(t.orders.size()) * t.heads_per_order)
      return invalid_argument(fmt::format("layer {}: {} primes for {} orders x {} heads", t.layer_id,
                                          t.primes.size(), t.orders.size(), t.heads_per_order));
  }
  if (spec.compressed_vocab_size < 1)
    return invalid_argument(fmt::format(
        "model.compressed_vocab_size: {} must be at least 1; give the size of the compressed tokenizer's vocabulary",
        spec.compressed_vocab_size));
  if (spec.pad_id < 0 || spec.pad_id >= spec.compressed_vocab_size)
    return invalid_argument(fmt::format(
        "model.pad_id: {} is outside the compressed vocabulary [0, {}); give the compressed id of the pad token",
        spec.pad_id, spec.compressed_vocab_size));
  return Status::ok();
}

bool names_a_model_file(std::string_view name) {
  return name.find('/') != std::string_view::npos || name.ends_with(".yaml") || name.ends_with(".yml");
}

namespace {

Result<ModelSpec> build_model(const std::string& name) {
  if (names_a_model_file(name)) return load_model_file(name);
  for (const EmbeddedModelFile& file : embedded_model_files()) {
    if (file.name != name) continue;
    ENGRAM_ASSIGN_OR_RETURN(ModelSpec spec, parse_model_file(file.text, "models/" + name + ".yaml"));
    ENGRAM_CHECK_MSG(spec.name == name, "a shipped model file's name: field must match its file name");
    return spec;
  }
  return invalid_argument(fmt::format("model: unknown model '{}'; known models: {}, or the path of a model file "
                                      "(.yaml; see models/ for the format)",
                                      excerpt(name), fmt::join(model_preset_names(), ", ")));
}

}  // namespace

Result<ModelSpec> model_preset(const std::string& name) {
  // Drawing V4.1's 48 primes costs about a millisecond; plan and every
  // emulated rank ask for it, so models are built once per process. A file
  // is keyed by its path: a run reads each model file once.
  static std::mutex mutex;
  static std::map<std::string, ModelSpec, std::less<>> built;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = built.find(name); it != built.end()) return it->second;
  auto spec = build_model(name);
  if (spec.is_ok()) built.emplace(name, spec.value());
  return spec;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const EmbeddedModelFile& file : embedded_model_files()) names.emplace_back(file.name);
  std::sort(names.begin(), names.end());  // deepseek-v4.1-flash before deepseek-v4.1-flash-layer1
  return names;
}

Result<int> table_index_of_layer(const ModelSpec& spec, int layer_id, std::string_view field) {
  std::string layers;
  for (size_t t = 0; t < spec.tables.size(); ++t) {
    if (spec.tables[t].layer_id == layer_id) return static_cast<int>(t);
    layers += fmt::format("{}{}", t == 0 ? "" : (t + 1 == spec.tables.size() ? " and " : ", "), spec.tables[t].layer_id);
  }
  return invalid_argument(fmt::format("{}: {} is not an Engram layer of model {}; its layers are {}", field, layer_id,
                                      spec.name, layers));
}

}  // namespace engram
