#include "core/deployment/model_yaml.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <filesystem>
#include <limits>

#include "core/base/text_excerpt.h"
#include "core/deployment/deployment.h"

namespace engram {
namespace {

constexpr const char* kModelKeys[] = {"name", "compressed_vocab_size", "pad_id", "dead_tokens", "hash_seed"};

template <typename T>
Result<T> whole_number(const YamlFields& f, const YAML::Node& node, const std::string& path, T min_value,
                       std::string_view example) {
  ENGRAM_ASSIGN_OR_RETURN(std::string text, f.text(node, path));
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range)
    return f.error(node, path, fmt::format("{} is out of range; it must be at most {}", excerpt(text),
                                           std::numeric_limits<T>::max()));
  if (ec != std::errc() || end != text.data() + text.size())
    return f.error(node, path, fmt::format("'{}' is not a whole number; write e.g. {}", excerpt(text), example));
  if (value < min_value)
    return f.error(node, path, fmt::format("{} is out of range; it must be at least {}", value, min_value));
  return value;
}

}  // namespace

Status resolve_model_file(const YamlFields& f, const YAML::Node& node, std::string_view path, std::string& name) {
  if (!names_a_model_file(name)) return Status::ok();
  // Relative to the file that names it, so a scenario runs from any directory.
  std::filesystem::path file(name);
  std::error_code ec;
  if (file.is_relative()) {
    const std::filesystem::path from = std::filesystem::path(f.source()).parent_path();
    if (!from.empty() && std::filesystem::is_directory(from, ec)) file = from / file;
  }
  file = std::filesystem::absolute(file, ec).lexically_normal();
  if (ec || !std::filesystem::is_regular_file(file, ec))
    return f.error(node, path,
                   fmt::format("model file '{}' ({}) does not exist or is not a regular file; give a model name ({}) "
                               "or the path of a model file, relative to this file",
                               excerpt(name), excerpt(file.string()), fmt::join(model_preset_names(), ", ")));
  name = file.string();
  return Status::ok();
}

Status parse_model_field(const YamlFields& f, const YAML::Node& node, std::string_view path, std::string& name,
                         HashOverrides& overrides) {
  const std::string at(path);
  if (node.IsScalar()) {
    ENGRAM_ASSIGN_OR_RETURN(name, f.name(node, at, kMaxNameBytes));
    return resolve_model_file(f, node, at, name);
  }
  if (!node.IsMap())
    return f.error(node, at,
                   fmt::format("expected a model name or a map such as {{name: deepseek-v4.1-flash, pad_id: 2}}, "
                               "found {}",
                               YamlFields::describe(node)));
  ENGRAM_RETURN_IF_ERROR(f.check_keys(node, at, kModelKeys));
  if (!node["name"]) return f.error(node, at + ".name", "missing; name the model preset, e.g. name: deepseek-v4.1-flash");
  ENGRAM_ASSIGN_OR_RETURN(name, f.name(node["name"], at + ".name", kMaxNameBytes));
  ENGRAM_RETURN_IF_ERROR(resolve_model_file(f, node["name"], at + ".name", name));
  HashOverrides o;
  if (const YAML::Node v = node["compressed_vocab_size"]) {
    ENGRAM_ASSIGN_OR_RETURN(o.compressed_vocab_size,
                            whole_number<int64_t>(f, v, at + ".compressed_vocab_size", 1, "99092"));
  }
  if (const YAML::Node v = node["pad_id"]) {
    ENGRAM_ASSIGN_OR_RETURN(o.pad_id, whole_number<int64_t>(f, v, at + ".pad_id", 0, "2"));
  }
  if (const YAML::Node v = node["dead_tokens"]) {
    ENGRAM_ASSIGN_OR_RETURN(std::string text, f.text(v, at + ".dead_tokens"));
    o.dead_token_rule = parse_dead_token_rule(text);
    if (!o.dead_token_rule)
      return f.error(v, at + ".dead_tokens",
                     fmt::format("'{}' is not a DEAD-token rule; write {}", excerpt(text), kDeadTokenRuleChoices));
  }
  if (const YAML::Node v = node["hash_seed"]) {
    ENGRAM_ASSIGN_OR_RETURN(o.seed, whole_number<uint64_t>(f, v, at + ".hash_seed", 0, "0"));
  }
  // The pad id against the vocabulary it indexes, the preset's where the
  // file leaves one out, reported at the line that set the pad id.
  auto preset = model_preset(name);
  if (!preset.is_ok() && names_a_model_file(name)) return preset.status();  // it names the file, line and field
  if (!preset.is_ok()) {
    std::string known;
    for (const std::string& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
    return f.error(node["name"], at + ".name", fmt::format("unknown model '{}'; known models: {}", excerpt(name), known));
  }
  const int64_t vocab = o.compressed_vocab_size.value_or(preset->compressed_vocab_size);
  const int64_t pad = o.pad_id.value_or(preset->pad_id);
  if (pad >= vocab) {
    const char* key = o.pad_id ? "pad_id" : "compressed_vocab_size";
    return f.error(node[key], at + "." + key,
                   fmt::format("the pad id {} is outside the compressed vocabulary [0, {}); the pad id is a compressed "
                               "token id, so it must be below compressed_vocab_size",
                               pad, vocab));
  }
  overrides = o;
  return Status::ok();
}

}  // namespace engram
