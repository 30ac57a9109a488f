// The token-space settings a deployment or a scenario may set over its model
// preset: the presets say where each default comes from, and a run whose
// tokenizer says otherwise overrides it here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "core/model/table_spec.h"

namespace engram {

struct HashOverrides {
  std::optional<int64_t> compressed_vocab_size;
  std::optional<int64_t> pad_id;
  std::optional<DeadTokenRule> dead_token_rule;
  std::optional<uint64_t> seed;

  bool empty() const { return !compressed_vocab_size && !pad_id && !dead_token_rule && !seed; }
  // "" when empty, else e.g. "{compressed_vocab_size: 500, pad_id: 7}":
  // stable, so it can key caches of built tables.
  std::string to_text() const;
};

// model_preset(name) with the overrides applied and checked. Errors are
// invalid_argument naming `field` (e.g. "model" or "lookup.model") and the
// setting: "model.pad_id: 640 is outside ...".
Result<ModelSpec> resolve_model(const std::string& name, const HashOverrides& overrides, std::string_view field);

}  // namespace engram
