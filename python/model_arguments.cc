#include "python/model_arguments.h"

#include <fmt/format.h>

#include "python/arguments.h"
#include "python/errors.h"

namespace engram::python {

HashOverrides hash_overrides_argument(std::optional<int64_t> compressed_vocab_size, std::optional<int64_t> pad_id,
                                      const std::optional<std::string>& dead_tokens,
                                      std::optional<uint64_t> hash_seed) {
  HashOverrides o;
  o.compressed_vocab_size = compressed_vocab_size;
  o.pad_id = pad_id;
  o.seed = hash_seed;
  if (dead_tokens) {
    o.dead_token_rule = parse_dead_token_rule(*dead_tokens);
    if (!o.dead_token_rule)
      raise_status(invalid_argument(
          fmt::format("dead_tokens: '{}' is not a DEAD-token rule; give {}", *dead_tokens, kDeadTokenRuleChoices)));
  }
  return o;
}

ModelSpec model_argument(py::handle model, const HashOverrides& overrides) {
  return value_or_raise(resolve_model(path_argument(model, "model"), overrides, "model"));
}

int layer_argument(const ModelSpec& model, int layer) {
  return value_or_raise(table_index_of_layer(model, layer, "layer"));
}

}  // namespace engram::python
