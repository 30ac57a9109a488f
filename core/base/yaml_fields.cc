#include "core/base/yaml_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace engram {

Status YamlFields::error_at(const YAML::Mark& mark, std::string_view path, std::string_view problem) const {
  if (mark.is_null()) return invalid_argument(fmt::format("{}: {}: {}", source_, path, problem));
  return invalid_argument(
      fmt::format("{}: line {}, column {}: {}: {}", source_, mark.line + 1, mark.column + 1, path, problem));
}

Status YamlFields::error(const YAML::Node& node, std::string_view path, std::string_view problem) const {
  return error_at(node.Mark(), path, problem);
}

Status YamlFields::check_keys(const YAML::Node& map, std::string_view path, std::span<const char* const> known,
                              std::span<const std::string> ignored) const {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;  // a copy: the iterator's pair is a temporary
    if (!key.IsScalar()) return error(key, path, "field names must be plain words");
    const std::string& name = key.Scalar();
    bool ok = std::any_of(known.begin(), known.end(), [&](const char* k) { return name == k; }) ||
              std::any_of(ignored.begin(), ignored.end(), [&](const std::string& k) { return name == k; });
    if (!ok) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return error(key, join(path, name), fmt::format("unknown field '{}'; known fields here: {}", name, list));
    }
  }
  return Status::ok();
}

Result<std::string> YamlFields::text(const YAML::Node& node, std::string_view path) const {
  if (!node.IsScalar()) return error(node, path, fmt::format("expected a single value, found {}", describe(node)));
  return node.Scalar();
}

std::string YamlFields::join(std::string_view path, std::string_view field) {
  return path.empty() ? std::string(field) : fmt::format("{}.{}", path, field);
}

std::string YamlFields::describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return fmt::format("'{}'", node.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "an undefined node";
  }
}

Result<YAML::Node> load_yaml_text(std::string_view text, std::string_view source_name) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    return invalid_argument(fmt::format("{}: line {}, column {}: not valid YAML: {}", source_name, e.mark.line + 1,
                                        e.mark.column + 1, e.msg));
  }
}

Result<std::string> read_text_file(const std::string& path, std::string_view what) {
  std::ifstream in(path);
  if (!in) return invalid_argument(fmt::format("{}: cannot read '{}'; check the path", what, path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace engram
