// Field-level YAML reading with positions, shared by the deployment and the
// scenario parsers: errors as invalid_argument "<source>: line L, column C:
// <field path>: <problem>" (or "<source>: <path>: <problem>" where yaml-cpp
// has no position), unknown-key checks, single values, and loading text or a
// file with the parse error's position.
//
// Input is bounded before anything is built from it: a file is opened
// without blocking and must be a regular file of at most kMaxYamlFileBytes;
// a document must be the only one in its file, nest at most kMaxYamlDepth
// levels, hold at most kMaxYamlNodes nodes counting each use of an alias
// (an alias bomb stops here), and name no key twice in one map (YAML
// readers disagree on which copy wins). Values echoed in errors are cut to
// a readable excerpt.
#pragma once

#include <yaml-cpp/yaml.h>

#include <span>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace engram {

inline constexpr size_t kMaxYamlFileBytes = 1 << 20;
inline constexpr int kMaxYamlDepth = 64;
inline constexpr size_t kMaxYamlNodes = 200000;

class YamlFields {
 public:
  explicit YamlFields(std::string_view source) : source_(source) {}

  const std::string& source() const { return source_; }

  Status error_at(const YAML::Mark& mark, std::string_view path, std::string_view problem) const;
  Status error(const YAML::Node& node, std::string_view path, std::string_view problem) const;

  // Unknown keys (not in `known`, nor in `ignored`) are errors at the key's
  // own position, with the closest known one ("did you mean 'tp'?") and all
  // of them; so are keys that are not scalars. Every such key of the map,
  // one error a line.
  Status check_keys(const YAML::Node& map, std::string_view path, std::span<const char* const> known,
                    std::span<const std::string> ignored = {}) const;

  // The scalar's text; anything else is "expected a single value".
  Result<std::string> text(const YAML::Node& node, std::string_view path) const;
  // The same, at most `max_bytes` long (names, ids).
  Result<std::string> name(const YAML::Node& node, std::string_view path, size_t max_bytes) const;
  // Exactly true or false: YAML 1.1's yes/no/on/off and other spellings
  // are refused, as readers disagree on them.
  Result<bool> boolean(const YAML::Node& node, std::string_view path) const;

  // A scalar written in quotes: a string, whatever it looks like.
  static bool is_quoted(const YAML::Node& node);
  // "path.field", or "field" at the top level.
  static std::string join(std::string_view path, std::string_view field);
  // "nothing", "'value'", "a list", "a map": what was found, for errors.
  static std::string describe(const YAML::Node& node);

 private:
  std::string source_;
};

// One YAML document within the limits above; a syntax error as "<source>:
// line L, column C: not valid YAML: <what>".
Result<YAML::Node> load_yaml_text(std::string_view text, std::string_view source_name);

// The whole file, read once by read_input_file (core/base/input_file.h: a
// regular file of at most `max_bytes`, the link rule, no FIFO or device).
Result<std::string> read_text_file(const std::string& path, std::string_view what,
                                   size_t max_bytes = kMaxYamlFileBytes);

}  // namespace engram
