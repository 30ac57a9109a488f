#include "core/model/table_spec.h"
#include "core/base/text_excerpt.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_set>

namespace engram {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  if (n % 3 == 0) return n == 3;
  for (int64_t i = 5; i * i <= n; i += 6) {
    if (n % i == 0 || n % (i + 2) == 0) return false;
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

std::vector<std::vector<int64_t>> draw_primes(int64_t engram_vocab_size, int layer_count, int order_count,
                                              int heads_per_order) {
  std::unordered_set<int64_t> used;
  std::vector<std::vector<int64_t>> per_layer(static_cast<size_t>(layer_count));
  for (int layer = 0; layer < layer_count; ++layer) {
    for (int order = 0; order < order_count; ++order) {
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
  ModelSpec spec;
  spec.name = std::move(name);
  spec.engram_vocab_size = engram_vocab_size;
  spec.compressed_vocab_size = engram_vocab_size;
  spec.pad_id = 0;
  spec.dead_token_rule = DeadTokenRule::kBarrier;
  spec.seed = seed;
  if (engram_vocab_size < 2)
    return invalid_argument(
        fmt::format("model.engram_vocab_size: {} is too small; use at least 2", engram_vocab_size));
  if (heads_per_order < 1)
    return invalid_argument(fmt::format("model.heads_per_order: {} must be at least 1", heads_per_order));
  if (orders.empty())
    return invalid_argument("model.orders: empty; give at least one n-gram order, e.g. [2, 3, 4]");
  auto primes = draw_primes(engram_vocab_size, static_cast<int>(layer_ids.size()), static_cast<int>(orders.size()),
                            heads_per_order);
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
  for (const TableSpec& t : spec.tables) {
    // The multipliers' numpy seed is seed + 10007 * layer_id, which numpy
    // requires to be non-negative.
    if (t.layer_id < 0)
      return invalid_argument(fmt::format("model.layers: layer id {} is negative; layer ids count from 0", t.layer_id));
    for (int o : t.orders)
      if (o < 1 || o > 8)
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

namespace {

// DeepSeek-V4.1-Flash. Sources (engine ports of the checkpoint's
// config.json; the config itself was not at hand):
// - layers [1, 14], engram_max_ngram_size 4 (orders 2, 3, 4), engram_n_heads 8,
//   engram_head_dim 256, engram_vocab_size 16,000,000: the config fields vLLM's
//   EngramLayout (vllm/models/deepseek_v4_1/common/engram.py) and SGLang's
//   build_engram_layout (python/sglang/srt/layers/engram.py) read; vLLM checks
//   the primes against engram_num_embeddings [384006168, 384016682], which our
//   table_spec_test checks too. Rows: FP8 E4M3 with UE8M0 scales per 32
//   (both engines' lookup kernels).
// - compressed_vocab_size 99,092: the config's engram_compressed_vocab_size as
//   quoted by ports (e.g. ggml-org/llama.cpp pull 28696, "token_map compressing
//   to the config's 99092"); the numpy multipliers it gives match the values
//   third-party ports pin for layers 1 and 14.
// - pad_id 2: NOT FOUND stated. The config names the raw pad token
//   (engram_pad_token_id 2); the engines hash with its compressed id,
//   token_map[2], which needs the tokenizer. Compressed ids are handed out in
//   raw-id order, so token_map[2] == 2 when raw ids 0, 1, 2 (begin, end and pad
//   special tokens in DeepSeek's tokenizers) normalise to three different keys.
//   Settable (model.pad_id) for when the tokenizer says otherwise.
// - seed 0 and the barrier DEAD rule: both engines draw default_rng(10007 *
//   layer_id), the reference's seed + 10007 * layer_id with its default seed 0,
//   and block the lookback at a DEAD token (vLLM _hash_ids_kernel, SGLang
//   EngramHasher.forward).
Result<ModelSpec> deepseek_v41_flash(const std::string& name) {
  ENGRAM_ASSIGN_OR_RETURN(ModelSpec spec, make_model_spec(name, 16'000'000, {1, 14}, {2, 3, 4}, 8,
                                                          RowFormat::kFp8E4M3Ue8m0, 256, 0));
  spec.compressed_vocab_size = 99'092;
  spec.pad_id = 2;
  spec.dead_token_rule = DeadTokenRule::kBarrier;
  ENGRAM_RETURN_IF_ERROR(validate(spec));
  return spec;
}

// Test-sized, V4.1's structure: two layers (1 and 14), FP8 rows, a
// compressed vocabulary below the table size as in V4.1, pad id 2, the
// engines' DEAD rule.
Result<ModelSpec> test_sized(const std::string& name, int64_t engram_vocab_size, std::vector<int> orders,
                             int heads_per_order, int dim, uint64_t seed, int64_t compressed_vocab_size) {
  ENGRAM_ASSIGN_OR_RETURN(ModelSpec spec, make_model_spec(name, engram_vocab_size, {1, 14}, std::move(orders),
                                                          heads_per_order, RowFormat::kFp8E4M3Ue8m0, dim, seed));
  spec.compressed_vocab_size = compressed_vocab_size;
  spec.pad_id = 2;
  spec.dead_token_rule = DeadTokenRule::kBarrier;
  ENGRAM_RETURN_IF_ERROR(validate(spec));
  return spec;
}

// tiny: primes above 1000, 4 heads. tiny-8h / tiny-7h: vLLM's
// test_engram_dp_shard tables, prime buckets near 100, dim 64, 8 heads that
// split evenly over 4 shards and 7 that leave one padded.
Result<ModelSpec> tiny(const std::string& name) { return test_sized(name, 1000, {2, 3}, 2, 64, 0x7179, 640); }

Result<ModelSpec> build_model_preset(const std::string& name) {
  if (name == "deepseek-v4.1-flash") return deepseek_v41_flash(name);
  if (name == "tiny") return tiny(name);
  if (name == "tiny-8h") return test_sized(name, 100, {2, 3}, 4, 64, 0x7e57, 64);
  if (name == "tiny-7h") return test_sized(name, 100, {2}, 7, 64, 0x7e57, 64);
  return invalid_argument(fmt::format("model: unknown model '{}'; known models: {}", excerpt(name),
                                      fmt::join(model_preset_names(), ", ")));
}

}  // namespace

Result<ModelSpec> model_preset(const std::string& name) {
  // Drawing V4.1's 48 primes costs about a millisecond; plan and every
  // emulated rank ask for it, so presets are built once per process.
  static std::mutex mutex;
  static std::map<std::string, ModelSpec, std::less<>> built;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = built.find(name); it != built.end()) return it->second;
  auto spec = build_model_preset(name);
  if (spec.is_ok()) built.emplace(name, spec.value());
  return spec;
}

std::vector<std::string> model_preset_names() { return {"deepseek-v4.1-flash", "tiny", "tiny-8h", "tiny-7h"}; }

}  // namespace engram
