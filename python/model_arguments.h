// The model arguments of the oracle and the request hasher: a model (a
// preset name or a model file's path) with the token-space settings a
// caller may set over it, and one of its Engram layers.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/model/hash_overrides.h"
#include "core/model/table_spec.h"

namespace engram::python {

namespace py = pybind11;

// compressed_vocab_size, pad_id, dead_tokens ("barrier", "barrier_no_row",
// "literal") and hash_seed: None keeps the model's own.
HashOverrides hash_overrides_argument(std::optional<int64_t> compressed_vocab_size, std::optional<int64_t> pad_id,
                                      const std::optional<std::string>& dead_tokens, std::optional<uint64_t> hash_seed);

// A preset name (models/: "tiny", "deepseek-v4.1-flash", ...) or the path of
// a model file (str or pathlib.Path); raises naming what is wrong.
ModelSpec model_argument(py::handle model, const HashOverrides& overrides = {});

// The index of Engram layer `layer` in model.tables; raises naming the
// model's layers.
int layer_argument(const ModelSpec& model, int layer);

// The keyword arguments the hash overrides take, as pybind11 declares them.
#define ENGRAM_PYTHON_HASH_OVERRIDE_ARGS                                                        \
  py::arg("compressed_vocab_size") = py::none(), py::arg("pad_id") = py::none(),                \
      py::arg("dead_tokens") = py::none(), py::arg("hash_seed") = py::none()

}  // namespace engram::python
