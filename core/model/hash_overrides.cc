#include "core/model/hash_overrides.h"

#include <fmt/format.h>

namespace engram {

std::string HashOverrides::to_text() const {
  std::string parts;
  auto add = [&parts](std::string part) { parts += (parts.empty() ? "" : ", ") + part; };
  if (compressed_vocab_size) add(fmt::format("compressed_vocab_size: {}", *compressed_vocab_size));
  if (pad_id) add(fmt::format("pad_id: {}", *pad_id));
  if (dead_token_rule) add(fmt::format("dead_tokens: {}", dead_token_rule_name(*dead_token_rule)));
  if (seed) add(fmt::format("hash_seed: {}", *seed));
  return parts.empty() ? std::string() : "{" + parts + "}";
}

Result<ModelSpec> resolve_model(const std::string& name, const HashOverrides& overrides, std::string_view field) {
  ENGRAM_ASSIGN_OR_RETURN(ModelSpec spec, model_preset(name));
  if (overrides.compressed_vocab_size) spec.compressed_vocab_size = *overrides.compressed_vocab_size;
  if (overrides.pad_id) spec.pad_id = *overrides.pad_id;
  if (overrides.dead_token_rule) spec.dead_token_rule = *overrides.dead_token_rule;
  if (overrides.seed) spec.seed = *overrides.seed;
  // The checks validate() makes, named from where the values came.
  if (spec.compressed_vocab_size < 1)
    return invalid_argument(fmt::format(
        "{}.compressed_vocab_size: {} must be at least 1; give the size of the compressed tokenizer's vocabulary",
        field, spec.compressed_vocab_size));
  if (spec.pad_id < 0 || spec.pad_id >= spec.compressed_vocab_size)
    return invalid_argument(fmt::format(
        "{}.pad_id: {} is outside the compressed vocabulary [0, {}) of {}; give the compressed id of the pad token{}",
        field, spec.pad_id, spec.compressed_vocab_size, name,
        overrides.pad_id ? "" : " (the preset's pad id; set pad_id too)"));
  ENGRAM_RETURN_IF_ERROR(validate(spec));
  return spec;
}

}  // namespace engram
