// Field-level YAML reading with positions, shared by the deployment and the
// scenario parsers: errors as invalid_argument "<source>: line L, column C:
// <field path>: <problem>" (or "<source>: <path>: <problem>" where yaml-cpp
// has no position), unknown-key checks, single values, and loading text or a
// file with the parse error's position.
#pragma once

#include <yaml-cpp/yaml.h>

#include <span>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace engram {

class YamlFields {
 public:
  explicit YamlFields(std::string_view source) : source_(source) {}

  const std::string& source() const { return source_; }

  Status error_at(const YAML::Mark& mark, std::string_view path, std::string_view problem) const;
  Status error(const YAML::Node& node, std::string_view path, std::string_view problem) const;

  // Unknown keys (not in `known`, nor in `ignored`) are errors at the key's
  // own position, listing the known ones; so are keys that are not scalars.
  Status check_keys(const YAML::Node& map, std::string_view path, std::span<const char* const> known,
                    std::span<const std::string> ignored = {}) const;

  // The scalar's text; anything else is "expected a single value".
  Result<std::string> text(const YAML::Node& node, std::string_view path) const;

  // "path.field", or "field" at the top level.
  static std::string join(std::string_view path, std::string_view field);
  // "nothing", "'value'", "a list", "a map": what was found, for errors.
  static std::string describe(const YAML::Node& node);

 private:
  std::string source_;
};

// YAML::Load with a syntax error as "<source>: line L, column C: not valid
// YAML: <what>".
Result<YAML::Node> load_yaml_text(std::string_view text, std::string_view source_name);

// The whole file; "<what>: cannot read '<path>'; check the path" when it
// cannot be opened.
Result<std::string> read_text_file(const std::string& path, std::string_view what);

}  // namespace engram
