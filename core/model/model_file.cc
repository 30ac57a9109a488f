#include "core/model/model_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <limits>

#include "core/base/field_errors.h"
#include "core/base/text_excerpt.h"
#include "core/base/units.h"
#include "core/base/yaml_fields.h"

namespace engram {
namespace {

constexpr const char* kTopKeys[] = {"name", "tables", "hashing", "serving"};
constexpr const char* kTableKeys[] = {"layers", "orders", "heads_per_order", "engram_vocab_size", "dim", "row_format"};
constexpr const char* kHashingKeys[] = {"compressed_vocab_size", "pad_id", "dead_tokens", "seed"};
constexpr const char* kServingKeys[] = {"weights_per_gpu", "kv_bytes_per_token", "source"};
constexpr size_t kMaxModelNameBytes = 128;
constexpr int kMaxTpSize = 1 << 16;

class ModelFields : public YamlFields {
 public:
  using YamlFields::YamlFields;

  // A whole number in [min_value, max_value]; decimal, or hex with 0x (seeds).
  template <typename T>
  Result<T> number(const YAML::Node& node, std::string_view path, T min_value, T max_value,
                   std::string_view example) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string text, this->text(node, path));
    const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
    const char* first = text.data() + (hex ? 2 : 0);
    T value{};
    auto [end, ec] = std::from_chars(first, text.data() + text.size(), value, hex ? 16 : 10);
    if (ec != std::errc() || end != text.data() + text.size() || value < min_value || value > max_value) {
      return error(node, path, fmt::format("'{}' is not a whole number in [{}, {}]; write e.g. {}", excerpt(text),
                                           min_value, max_value, example));
    }
    return value;
  }

  // A list of whole numbers, or one number standing for `count` equal ones (count 0: exactly a list).
  template <typename T>
  Result<std::vector<T>> numbers(const YAML::Node& node, std::string_view path, T min_value, T max_value,
                                 std::string_view example, size_t count_for_scalar = 0) const {
    std::vector<T> out;
    if (node.IsScalar() && count_for_scalar > 0) {
      ENGRAM_ASSIGN_OR_RETURN(T value, number<T>(node, path, min_value, max_value, example));
      out.assign(count_for_scalar, value);
      return out;
    }
    if (node.IsSequence() && node.size() == 0) {
      return error(node, path, fmt::format("an empty list; give at least one, e.g. {}", example));
    }
    if (!node.IsSequence()) {
      return error(node, path, fmt::format("expected a list such as {}, found {}", example, describe(node)));
    }
    for (size_t i = 0; i < node.size(); ++i) {
      ENGRAM_ASSIGN_OR_RETURN(T value, number<T>(node[i], fmt::format("{}[{}]", path, i), min_value, max_value,
                                                 example));
      out.push_back(value);
    }
    return out;
  }

  Result<uint64_t> size(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string text, this->text(node, path));
    auto bytes = parse_bytes(text, path);
    if (!bytes.is_ok()) return at(node, bytes.status().message());  // it names the field, the value and the fix
    return bytes.value();
  }

  // A message that already names its field, at `node`'s position; the core's
  // "model.<field>" names become this file's "<section>.<field>".
  Status at(const YAML::Node& node, std::string message, std::string_view section = "") const {
    if (!section.empty() && message.starts_with(fmt::format("model.{}", section))) {
      message = message.substr(6);  // "model.tables: ..." names the section itself
    } else if (!section.empty() && message.starts_with("model.")) {
      message = std::string(section) + message.substr(5);
    }
    const YAML::Mark m = node.Mark();
    if (m.is_null()) return invalid_argument(fmt::format("{}: {}", source(), message));
    return invalid_argument(fmt::format("{}: line {}, column {}: {}", source(), m.line + 1, m.column + 1, message));
  }

  // A required map field.
  Result<YAML::Node> section(const YAML::Node& parent, std::string_view key, std::string_view path,
                             std::string_view example) const {
    const YAML::Node node = parent[std::string(key)];
    if (!node) return error(parent, join(path, key), fmt::format("missing; write e.g. {}", example));
    if (!node.IsMap()) return error(node, join(path, key), fmt::format("expected a map, found {}", describe(node)));
    return node;
  }

  Result<YAML::Node> required(const YAML::Node& map, std::string_view key, std::string_view path,
                              std::string_view example) const {
    const YAML::Node node = map[std::string(key)];
    if (!node) return error(map, join(path, key), fmt::format("missing; write e.g. {}: {}", key, example));
    return node;
  }
};

Result<RowFormat> row_format_of(const ModelFields& f, const YAML::Node& node) {
  ENGRAM_ASSIGN_OR_RETURN(std::string text, f.text(node, "tables.row_format"));
  if (text == "fp8_e4m3_ue8m0") return RowFormat::kFp8E4M3Ue8m0;
  if (text == "bf16") return RowFormat::kBf16;
  return f.error(node, "tables.row_format",
                 fmt::format("'{}' is not a row format; write fp8_e4m3_ue8m0 (FP8 E4M3 values, one UE8M0 scale per "
                             "32) or bf16",
                             excerpt(text)));
}

Status parse_serving(const ModelFields& f, const YAML::Node& node, ServingFigures& out) {
  if (!node.IsMap()) return f.error(node, "serving", fmt::format("expected a map, found {}", YamlFields::describe(node)));
  ENGRAM_RETURN_IF_ERROR(f.check_keys(node, "serving", kServingKeys));
  if (const YAML::Node w = node["weights_per_gpu"]) {
    if (!w.IsMap() || w.size() == 0)
      return f.error(w, "serving.weights_per_gpu",
                     fmt::format("expected a map of TP size to bytes per GPU, e.g. {{1: 600GiB, 8: 80GiB}}, found {}",
                                 YamlFields::describe(w)));
    for (const auto& entry : w) {
      ENGRAM_ASSIGN_OR_RETURN(int tp, f.number<int>(entry.first, "serving.weights_per_gpu", 1, kMaxTpSize, "8"));
      const std::string path = fmt::format("serving.weights_per_gpu.{}", tp);
      ENGRAM_ASSIGN_OR_RETURN(uint64_t bytes, f.size(entry.second, path));
      for (const auto& [seen, unused] : out.weights_bytes_per_gpu_by_tp)
        if (seen == tp) return f.error(entry.first, path, "given twice; give each TP size once");
      out.weights_bytes_per_gpu_by_tp.emplace_back(tp, bytes);
    }
    std::sort(out.weights_bytes_per_gpu_by_tp.begin(), out.weights_bytes_per_gpu_by_tp.end());
  }
  if (const YAML::Node k = node["kv_bytes_per_token"]) {
    ENGRAM_ASSIGN_OR_RETURN(out.kv_bytes_per_token, f.size(k, "serving.kv_bytes_per_token"));
    if (out.kv_bytes_per_token == 0)
      return f.error(k, "serving.kv_bytes_per_token", "0B: a token's KV cache takes some bytes; leave the field out "
                                                      "if you do not know it");
  }
  if (const YAML::Node s = node["source"]) {
    ENGRAM_ASSIGN_OR_RETURN(out.source, f.name(s, "serving.source", 512));
  }
  return Status::ok();
}

}  // namespace

std::optional<uint64_t> ServingFigures::weights_bytes_per_gpu(int tp) const {
  for (const auto& [at, bytes] : weights_bytes_per_gpu_by_tp)
    if (at == tp) return bytes;
  return std::nullopt;
}

Result<ModelSpec> parse_model_file(std::string_view text, std::string_view source) {
  ENGRAM_ASSIGN_OR_RETURN(YAML::Node root, load_yaml_text(text, source));
  const ModelFields f(source);
  if (!root.IsMap()) return f.error(root, "", fmt::format("expected a model file (a map with name, tables and "
                                                          "hashing), found {}",
                                                          YamlFields::describe(root)));
  // Every field's error in one report; the checks that combine fields run
  // only once the fields they read are good.
  FieldErrors e;
  e.add(f.check_keys(root, "", kTopKeys));
  std::string name;
  if (auto n = f.required(root, "name", "", "my-model"); e.add(n.status())) e.set(name, f.name(*n, "name", kMaxModelNameBytes));

  std::vector<int> layers, orders;
  std::vector<int64_t> vocab;
  int heads = 0, dim = 0;
  RowFormat format = RowFormat::kFp8E4M3Ue8m0;
  const auto tables_or = f.section(root, "tables", "", "tables: {layers: [1], orders: [2, 3], ...}");
  const bool tables_ok = e.add(tables_or.status());
  const size_t before_tables = e.count();
  YAML::Node tables, vocab_node, dim_node;
  if (tables_ok) {
    tables = *tables_or;
    e.add(f.check_keys(tables, "tables", kTableKeys));
    if (auto n = f.required(tables, "layers", "tables", "[1, 14]"); e.add(n.status()))
      e.set(layers, f.numbers<int>(*n, "tables.layers", 0, kMaxLayerId, "[1, 14]"));
    if (auto n = f.required(tables, "orders", "tables", "[2, 3, 4]"); e.add(n.status()))
      e.set(orders, f.numbers<int>(*n, "tables.orders", 1, 8, "[2, 3, 4]"));
    if (auto n = f.required(tables, "heads_per_order", "tables", "8"); e.add(n.status()))
      e.set(heads, f.number<int>(*n, "tables.heads_per_order", 1, kMaxHeadsPerOrder, "8"));
    if (auto n = f.required(tables, "engram_vocab_size", "tables", "16000000"); e.add(n.status())) {
      vocab_node = *n;
      e.set(vocab, f.numbers<int64_t>(vocab_node, "tables.engram_vocab_size", 2, kMaxEngramVocabSize, "16000000",
                                      std::max<size_t>(orders.size(), 1)));
    }
    if (auto n = f.required(tables, "dim", "tables", "256"); e.add(n.status())) {
      dim_node = *n;
      e.set(dim, f.number<int>(dim_node, "tables.dim", 1, kMaxRowDim, "256"));
    }
    if (auto n = f.required(tables, "row_format", "tables", "fp8_e4m3_ue8m0"); e.add(n.status()))
      e.set(format, row_format_of(f, *n));
    if (e.count() == before_tables && vocab.size() != orders.size())
      e.add(f.error(vocab_node, "tables.engram_vocab_size",
                    fmt::format("{} sizes for {} n-gram orders; give one size, or one per order", vocab.size(),
                                orders.size())));
    if (e.count() == before_tables && format == RowFormat::kFp8E4M3Ue8m0 && dim % kScaleBlock != 0)
      e.add(f.error(dim_node, "tables.dim",
                    fmt::format("{} is not a multiple of {}: FP8 rows carry one UE8M0 scale per {} values; write {} "
                                "or use row_format: bf16",
                                dim, kScaleBlock, kScaleBlock, (dim / kScaleBlock + 1) * kScaleBlock)));
  }
  const bool tables_read = tables_ok && e.count() == before_tables;

  int64_t compressed = 0, pad = 0;
  DeadTokenRule rule = DeadTokenRule::kBarrier;
  uint64_t seed = 0;
  const auto hashing_or = f.section(root, "hashing", "", "hashing: {compressed_vocab_size: 99092, pad_id: 2, ...}");
  YAML::Node hashing;
  if (e.add(hashing_or.status())) {
    hashing = *hashing_or;
    e.add(f.check_keys(hashing, "hashing", kHashingKeys));
    bool vocab_read = false;
    if (auto n = f.required(hashing, "compressed_vocab_size", "hashing", "99092"); e.add(n.status()))
      vocab_read = e.set(compressed, f.number<int64_t>(*n, "hashing.compressed_vocab_size", 1, int64_t{1} << 40, "99092"));
    if (auto n = f.required(hashing, "pad_id", "hashing", "2"); e.add(n.status()))
      e.set(pad, f.number<int64_t>(*n, "hashing.pad_id", 0, vocab_read ? compressed - 1 : int64_t{1} << 40, "2"));
    if (const YAML::Node d = hashing["dead_tokens"]) {
      std::string rule_text;
      if (e.set(rule_text, f.text(d, "hashing.dead_tokens"))) {
        if (const auto parsed = parse_dead_token_rule(rule_text)) {
          rule = *parsed;
        } else {
          e.add(f.error(d, "hashing.dead_tokens", fmt::format("'{}' is not a DEAD-token rule; write {}",
                                                              excerpt(rule_text), kDeadTokenRuleChoices)));
        }
      }
    }
    if (const YAML::Node s = hashing["seed"]) {
      // numpy seeds seed + 10007 * layer, which must stay a non-negative int64.
      const uint64_t max_seed = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - 10007ull * kMaxLayerId;
      e.set(seed, f.number<uint64_t>(s, "hashing.seed", 0, max_seed, "0"));
    }
  }
  ServingFigures serving;
  if (const YAML::Node s = root["serving"]) e.add(parse_serving(f, s, serving));
  if (!e.empty()) return e.status();

  ENGRAM_CHECK(tables_read);
  auto spec = make_model_spec(name, vocab, layers, orders, heads, format, dim, seed);
  if (!spec.is_ok()) return f.at(tables, spec.status().message(), "tables");
  spec->compressed_vocab_size = compressed;
  spec->pad_id = pad;
  spec->dead_token_rule = rule;
  spec->serving = std::move(serving);
  if (Status valid = validate(*spec); !valid.is_ok()) return f.at(hashing, valid.message(), "hashing");
  if (spec->table_bytes_total() > kMaxSizeBytes)
    return f.error(tables, "tables",
                   fmt::format("the tables take {} bytes, more than the {} bytes (1 EiB) sizes may reach; give fewer "
                               "or smaller heads",
                               spec->table_bytes_total(), kMaxSizeBytes));
  return spec;
}

Result<ModelSpec> load_model_file(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "model file"));
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  const std::string shown = ec ? path : absolute.lexically_normal().string();
  ENGRAM_ASSIGN_OR_RETURN(ModelSpec spec, parse_model_file(text, shown));
  spec.source_path = shown;
  return spec;
}

}  // namespace engram
