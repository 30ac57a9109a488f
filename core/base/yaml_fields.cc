#include "core/base/yaml_fields.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "core/base/did_you_mean.h"
#include "core/base/input_file.h"
#include "core/base/text_excerpt.h"

namespace engram {
namespace {

// A file name as errors show it: whatever bytes the name holds (a file may be
// named with an escape sequence), never raw.
std::string shown_source(std::string_view source) { return excerpt(source, kEchoedValueBytes); }

}  // namespace

Status YamlFields::error_at(const YAML::Mark& mark, std::string_view path, std::string_view problem) const {
  if (mark.is_null()) return invalid_argument(fmt::format("{}: {}: {}", shown_source(source_), path, problem));
  return invalid_argument(
      fmt::format("{}: line {}, column {}: {}: {}", shown_source(source_), mark.line + 1, mark.column + 1, path, problem));
}

Status YamlFields::error(const YAML::Node& node, std::string_view path, std::string_view problem) const {
  return error_at(node.Mark(), path, problem);
}

Status YamlFields::check_keys(const YAML::Node& map, std::string_view path, std::span<const char* const> known,
                              std::span<const std::string> ignored) const {
  // Every unknown key of the map, one error a line.
  std::string errors;
  const std::vector<std::string> known_names(known.begin(), known.end());
  auto add = [&](const Status& s) { errors += (errors.empty() ? "" : "\n") + s.message(); };
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;  // a copy: the iterator's pair is a temporary
    if (!key.IsScalar()) {
      add(error(key, path, "field names must be plain words"));
      continue;
    }
    const std::string& name = key.Scalar();
    bool ok = std::any_of(known.begin(), known.end(), [&](const char* k) { return name == k; }) ||
              std::any_of(ignored.begin(), ignored.end(), [&](const std::string& k) { return name == k; });
    if (!ok) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      const std::string guess = did_you_mean(name, known_names);
      add(error(key, join(path, excerpt(name)),
                fmt::format("unknown field '{}'; {}known fields here: {}", excerpt(name), guess.empty() ? "" : guess + " ",
                            list)));
    }
  }
  return errors.empty() ? Status::ok() : invalid_argument(errors);
}

Result<std::string> YamlFields::text(const YAML::Node& node, std::string_view path) const {
  if (!node.IsScalar()) return error(node, path, fmt::format("expected a single value, found {}", describe(node)));
  return node.Scalar();
}

Result<std::string> YamlFields::name(const YAML::Node& node, std::string_view path, size_t max_bytes) const {
  ENGRAM_ASSIGN_OR_RETURN(std::string value, text(node, path));
  if (value.size() > max_bytes) {
    return error(node, path, fmt::format("'{}' is longer than {} bytes; use a shorter name", excerpt(value), max_bytes));
  }
  // Names are printed in tables, warnings and commands to paste: a control
  // character there would drive the reader's terminal.
  if (has_control_characters(value)) {
    return error(node, path,
                 fmt::format("'{}' holds control characters; a name is printable text (letters, digits, '-', '.')",
                             excerpt(value)));
  }
  return value;
}

Result<bool> YamlFields::boolean(const YAML::Node& node, std::string_view path) const {
  ENGRAM_ASSIGN_OR_RETURN(std::string value, text(node, path));
  if (value == "true") return true;
  if (value == "false") return false;
  return error(node, path, fmt::format("'{}' is not a boolean; write true or false", excerpt(value)));
}

bool YamlFields::is_quoted(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "!"; }

std::string YamlFields::join(std::string_view path, std::string_view field) {
  return path.empty() ? std::string(field) : fmt::format("{}.{}", path, field);
}

std::string YamlFields::describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return fmt::format("'{}'", excerpt(node.Scalar()));
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "an undefined node";
  }
}

namespace {

// Walks the document once before any field is read: depth, size (aliases
// counted at every use) and duplicate keys.
class DocumentCheck {
 public:
  explicit DocumentCheck(std::string_view source) : source_(source) {}

  Status walk(const YAML::Node& node, int depth) {
    if (++nodes_ > kMaxYamlNodes) {
      return at(node, fmt::format("more than {} values (each use of an alias counts): refused as too large; a "
                                  "deployment or scenario needs a few hundred",
                                  kMaxYamlNodes));
    }
    if (depth > kMaxYamlDepth) {
      return at(node, fmt::format("nested deeper than {} levels; a deployment or scenario needs a handful",
                                  kMaxYamlDepth));
    }
    if (node.IsSequence()) {
      for (const YAML::Node& item : node) ENGRAM_RETURN_IF_ERROR(walk(item, depth + 1));
    } else if (node.IsMap()) {
      std::map<std::string, YAML::Mark> seen;
      for (auto it = node.begin(); it != node.end(); ++it) {
        const YAML::Node key = it->first;
        const YAML::Node value = it->second;
        if (key.IsScalar()) {
          auto [first, inserted] = seen.emplace(key.Scalar(), key.Mark());
          if (!inserted) {
            return at(key, fmt::format("key '{}' appears twice in one map (first at line {}); YAML readers disagree "
                                       "on which one wins, so write it once",
                                       excerpt(key.Scalar()), first->second.line + 1));
          }
        }
        ENGRAM_RETURN_IF_ERROR(walk(key, depth + 1));
        ENGRAM_RETURN_IF_ERROR(walk(value, depth + 1));
      }
    }
    return Status::ok();
  }

 private:
  Status at(const YAML::Node& node, std::string_view problem) const {
    const YAML::Mark m = node.Mark();
    if (m.is_null()) return invalid_argument(fmt::format("{}: {}", shown_source(source_), problem));
    return invalid_argument(fmt::format("{}: line {}, column {}: {}", shown_source(source_), m.line + 1, m.column + 1, problem));
  }

  std::string_view source_;
  size_t nodes_ = 0;
};

}  // namespace

Result<YAML::Node> load_yaml_text(std::string_view text, std::string_view source_name) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(text));
  } catch (const YAML::DeepRecursion& e) {
    return invalid_argument(fmt::format("{}: line {}, column {}: nested deeper than {} levels; a deployment or "
                                        "scenario needs a handful",
                                        shown_source(source_name), e.mark.line + 1, e.mark.column + 1, kMaxYamlDepth));
  } catch (const YAML::ParserException& e) {
    return invalid_argument(fmt::format("{}: line {}, column {}: not valid YAML: {}", shown_source(source_name), e.mark.line + 1,
                                        e.mark.column + 1, excerpt(e.msg, 200)));
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: not valid YAML: {}", shown_source(source_name), excerpt(e.what(), 200)));
  }
  if (documents.empty()) return YAML::Node();
  if (documents.size() > 1) {
    const YAML::Mark m = documents[1].Mark();
    return invalid_argument(fmt::format("{}: line {}: a second YAML document (after a --- line); a file holds one "
                                        "deployment or scenario: remove the --- or split the file",
                                        shown_source(source_name), m.is_null() ? 0 : m.line + 1));
  }
  DocumentCheck check(source_name);
  ENGRAM_RETURN_IF_ERROR(check.walk(documents[0], 0));
  return documents[0];
}

Result<std::string> read_text_file(const std::string& path, std::string_view what, size_t max_bytes) {
  return read_input_file(path, what, max_bytes, "a deployment or scenario file");
}

}  // namespace engram
