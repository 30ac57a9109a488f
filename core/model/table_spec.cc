#include "core/model/table_spec.h"
#include "core/base/checked_math.h"
#include "core/base/text_excerpt.h"
#include "core/base/units.h"
#include "core/model/model_file.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <span>
#include <unordered_set>

namespace engram {

namespace {

uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) {
  // Below 2^32 the product fits in 64 bits: no 128-bit division (the prime
  // search near 2^30 spends most of its time here).
  if (m <= (uint64_t{1} << 32)) return a * b % m;
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

// The fewest Miller-Rabin bases that decide every n below a bound
// (Jaeschke 1993; Jiang and Deng 2014 for the twelve): the answer is exact
// either way, fewer bases only make it faster.
std::span<const uint64_t> miller_rabin_bases(uint64_t n) {
  static constexpr uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  static constexpr uint64_t kBelow2To32[] = {2, 7, 61};  // every n < 4,759,123,141
  if (n < 4'759'123'141ull) return kBelow2To32;
  if (n < 3'474'749'660'383ull) return std::span(kBases, 6);        // 2..13
  if (n < 341'550'071'728'321ull) return std::span(kBases, 7);      // 2..17
  if (n < 3'825'123'056'546'413'051ull) return std::span(kBases, 9);  // 2..23
  return kBases;
}

}  // namespace

// Miller-Rabin after trial division by the first twelve primes: exact for
// all of int64, in microseconds even near 2^63 (trial division there took
// minutes).
bool is_prime(int64_t n) {
  if (n < 2) return false;
  constexpr uint64_t kSmallPrimes[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  const auto u = static_cast<uint64_t>(n);
  for (uint64_t p : kSmallPrimes) {
    if (u % p == 0) return u == p;
  }
  if (u < 41 * 41) return true;
  uint64_t d = u - 1;
  int twos = 0;
  for (; d % 2 == 0; d /= 2) ++twos;
  for (uint64_t a : miller_rabin_bases(u)) {
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

namespace {

uint64_t row_bytes_of(RowFormat format, int dim) {
  switch (format) {
    case RowFormat::kFp8E4M3Ue8m0: return static_cast<uint64_t>(dim) + static_cast<uint64_t>(dim / kScaleBlock);
    case RowFormat::kBf16: return static_cast<uint64_t>(dim) * 2;
  }
  return 0;
}

constexpr double kBytesPerEib = static_cast<double>(uint64_t{1} << 60);

}  // namespace

uint64_t TableSpec::row_bytes() const { return row_bytes_of(row_format, dim); }

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

namespace {

// One search's primes, ascending from its start, as far as it has looked;
// every prime before `used_front` is already some head's. The reference
// restarts each order's search at its start and walks past the primes used
// so far; that walk is the same every time, so it is done once per start
// and each order resumes where the used primes end (the same primes,
// without testing the same numbers again: 64 layers x 8 orders x 1,024
// heads took minutes, and now takes the one walk).
struct PrimeWalk {
  std::vector<int64_t> found;
  size_t used_front = 0;
  int64_t last_tested = 0;
};

}  // namespace

std::vector<std::vector<int64_t>> draw_primes(const std::vector<int64_t>& engram_vocab_size_per_order, int layer_count,
                                              int heads_per_order, PrimeSearchWork* work) {
  std::unordered_set<int64_t> used;
  std::map<int64_t, PrimeWalk> walks;  // by start
  std::vector<std::vector<int64_t>> per_layer(static_cast<size_t>(layer_count));
  uint64_t tests = 0;
  for (int layer = 0; layer < layer_count; ++layer) {
    for (const int64_t engram_vocab_size : engram_vocab_size_per_order) {
      ENGRAM_CHECK(engram_vocab_size >= 2 && engram_vocab_size <= kMaxEngramVocabSize);
      // Each order restarts just above engram_vocab_size - 1.
      auto [it, fresh] = walks.try_emplace(engram_vocab_size);
      PrimeWalk& walk = it->second;
      if (fresh) walk.last_tested = engram_vocab_size - 1;
      size_t next = walk.used_front;
      for (int head = 0; head < heads_per_order; ++head) {
        for (;; ++next) {
          while (next == walk.found.size()) {
            ++tests;
            if (is_prime(++walk.last_tested)) walk.found.push_back(walk.last_tested);
          }
          if (used.insert(walk.found[next]).second) break;  // unused until now: this head's
        }
        per_layer[static_cast<size_t>(layer)].push_back(walk.found[next]);
        ++next;
      }
      walk.used_front = next;  // every prime before it is used now
    }
  }
  if (work != nullptr) {
    work->primality_tests = tests;
    work->distinct_starts = walks.size();
  }
  return per_layer;
}

std::vector<std::vector<int64_t>> draw_primes(int64_t engram_vocab_size, int layer_count, int order_count,
                                              int heads_per_order) {
  const std::vector<int64_t> per_order(static_cast<size_t>(order_count), engram_vocab_size);
  return draw_primes(per_order, layer_count, heads_per_order, nullptr);
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
    case MinusZeroRule::kKeepUnlessSummed: return "keep_unless_summed";
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
  // Every head has more than engram_vocab_size - 1 rows, so the tables'
  // least size is known before the search: a model past the size bound is
  // refused without drawing its primes (in 128 bits: the product can pass 2^64).
  if (dim > 0) {
    unsigned __int128 rows_per_layer = 0;
    for (int64_t v : engram_vocab_size_per_order) rows_per_layer += static_cast<unsigned __int128>(v) * heads_per_order;
    const unsigned __int128 least_bytes = rows_per_layer * layer_ids.size() * row_bytes_of(format, dim);
    if (least_bytes > kMaxSizeBytes)
      return invalid_argument(fmt::format(
          "model.tables: {} layer(s) x {} n-gram order(s) x {} heads of at least engram_vocab_size rows x {}-byte "
          "rows take at least {:.3g} EiB, more than the 1 EiB sizes may reach; give fewer layers, orders or heads, "
          "a smaller engram_vocab_size or a smaller dim",
          layer_ids.size(), orders.size(), heads_per_order, row_bytes_of(format, dim),
          static_cast<double>(least_bytes) / kBytesPerEib));
  }
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
  // The sizes every later sum and product starts from: checked here, so
  // table_bytes() and table_bytes_total() never wrap.
  uint64_t total_bytes = 0;
  for (const TableSpec& t : spec.tables) {
    uint64_t rows = 0;
    bool fits = true;
    for (int64_t p : t.primes) {
      const auto sum = p > 0 ? sum_if_fits(rows, static_cast<uint64_t>(p)) : std::nullopt;
      fits = fits && sum.has_value();
      rows = sum.value_or(0);
    }
    const auto bytes = fits ? product_if_fits(rows, t.row_bytes()) : std::nullopt;
    const auto total = bytes ? sum_if_fits(total_bytes, *bytes) : std::nullopt;
    if (!total || *total > kMaxSizeBytes || rows > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return invalid_argument(fmt::format(
          "model.tables: layer {}'s table ({} heads x {}-byte rows) brings the tables past the 1 EiB sizes may "
          "reach; give fewer layers, orders or heads, a smaller engram_vocab_size or a smaller dim",
          t.layer_id, t.head_count(), t.row_bytes()));
    total_bytes = *total;
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
  // A memo of an immutable function, not state that couples callers: a
  // model is a function of its name (the presets are compiled in) and, for
  // a model file, of the file as read, known by its identity (device, inode,
  // size, modification and change times, taken before the read, so an edit
  // during it shows as a new identity next time). Each caller gets a copy of
  // what it would have built itself, so keeping models for the process
  // shares nothing between ranks, worlds or sessions, and an edited file is
  // read and built again (a long-lived Python session sees the edit; an
  // unchanged file costs a stat; only a rewrite in place to the same size
  // within one tick of coarse timestamps, as kernels before 6.13 keep them,
  // could pass unseen). Kept for the process, not per world: it answers
  // what no memo would, so scoping it buys nothing, while plan, validation
  // and each scenario run ask for models outside any world (fuzz --seeds 6
  // --check-determinism of scenarios/nvl72_16_racks.yaml asks 116 times)
  // and drawing V4.1's 48 primes costs about a millisecond. One entry per
  // name.
  static std::mutex mutex;
  static std::map<std::string, std::pair<std::string, ModelSpec>, std::less<>> built;
  std::string identity;
  if (names_a_model_file(name)) {
    struct stat st{};
    if (::stat(name.c_str(), &st) == 0)
      identity = fmt::format("{}:{}:{}:{}.{}:{}.{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                             st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = built.find(name); it != built.end() && it->second.first == identity) return it->second.second;
  auto spec = build_model(name);
  if (spec.is_ok()) built.insert_or_assign(name, std::pair{std::move(identity), spec.value()});
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
