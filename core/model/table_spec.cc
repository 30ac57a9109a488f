#include "core/model/table_spec.h"

#include <fmt/format.h>

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

std::vector<std::vector<int64_t>> draw_primes(int64_t vocab_size, int layer_count, int order_count,
                                              int heads_per_order) {
  std::unordered_set<int64_t> used;
  std::vector<std::vector<int64_t>> per_layer(static_cast<size_t>(layer_count));
  for (int layer = 0; layer < layer_count; ++layer) {
    for (int order = 0; order < order_count; ++order) {
      int64_t candidate = vocab_size - 1;  // each order restarts here
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

Result<ModelSpec> make_model_spec(std::string name, int64_t vocab_size, std::vector<int> layer_ids,
                                  std::vector<int> orders, int heads_per_order, RowFormat format,
                                  int dim, uint64_t seed) {
  ModelSpec spec;
  spec.name = std::move(name);
  spec.vocab_size = vocab_size;
  spec.seed = seed;
  if (vocab_size < 2)
    return invalid_argument(fmt::format("model.vocab_size: {} is too small; use at least 2", vocab_size));
  if (heads_per_order < 1)
    return invalid_argument(fmt::format("model.heads_per_order: {} must be at least 1", heads_per_order));
  if (orders.empty())
    return invalid_argument("model.orders: empty; give at least one n-gram order, e.g. [2, 3, 4]");
  auto primes = draw_primes(vocab_size, static_cast<int>(layer_ids.size()), static_cast<int>(orders.size()),
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
  return Status::ok();
}

namespace {
Result<ModelSpec> build_model_preset(const std::string& name) {
  if (name == "deepseek-v4.1-flash")
    return make_model_spec(name, 16'000'000, {1, 14}, {2, 3, 4}, 8, RowFormat::kFp8E4M3Ue8m0, 256, 0x5eed'4001);
  if (name == "tiny")
    return make_model_spec(name, 1000, {1, 14}, {2, 3}, 2, RowFormat::kFp8E4M3Ue8m0, 64, 0x7179);
  return invalid_argument(fmt::format("model: unknown model '{}'; known models: deepseek-v4.1-flash, tiny", name));
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

std::vector<std::string> model_preset_names() { return {"deepseek-v4.1-flash", "tiny"}; }

}  // namespace engram
