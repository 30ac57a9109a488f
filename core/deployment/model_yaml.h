// The `model` field of a deployment file (and a scenario's `lookup.model`):
// a model name or a model file's path (core/model/model_file.h), or a map naming it and the token-space settings
// that differ from it:
//   model: deepseek-v4.1-flash
//   model: {name: deepseek-v4.1-flash, compressed_vocab_size: 99092, pad_id: 2,
//           dead_tokens: barrier, hash_seed: 0}
#pragma once

#include <string>
#include <string_view>

#include "core/base/status.h"
#include "core/base/yaml_fields.h"
#include "core/model/hash_overrides.h"

namespace engram {

// Errors carry the line and column of the offending value and name the
// field (`path`.pad_id and so on), the value and the fix. With settings, the
// preset is resolved here, so a pad id outside its vocabulary is caught at
// its line.
// A name that is a model file's path (table_spec.h names_a_model_file),
// made absolute, relative to the directory of the file being read
// (f.source()); a missing file is an error at `node`. Other names are left.
Status resolve_model_file(const YamlFields& f, const YAML::Node& node, std::string_view path, std::string& name);

Status parse_model_field(const YamlFields& fields, const YAML::Node& node, std::string_view path, std::string& name,
                         HashOverrides& overrides);

}  // namespace engram
