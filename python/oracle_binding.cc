// The oracle: hash ids, the CPU reference of the lookup under an engine's
// scale-byte rule, and the stored rows of the filled test tables, on numpy
// arrays. Each is one call into core/ or kernels/.
#include <fmt/format.h>
#include <pybind11/stl.h>  // std::optional and std::vector arguments

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/base/text_list.h"
#include "core/engines/engine_profile.h"
#include "core/model/hashing.h"
#include "core/model/table_fill.h"
#include "kernels/gather_reference.h"
#include "python/arguments.h"
#include "python/errors.h"
#include "python/model_arguments.h"
#include "python/module_parts.h"

namespace engram::python {
namespace {

using namespace pybind11::literals;

// table_rows hands out at most this much at once: a V4.1 table is 94 GiB.
constexpr uint64_t kMaxTableRowsBytes = uint64_t{1} << 30;

py::array_t<int64_t> hash_ids(py::handle tokens_arg, py::handle model_arg, int layer, py::handle sequence_starts_arg,
                              std::optional<int64_t> compressed_vocab_size, std::optional<int64_t> pad_id,
                              std::optional<std::string> dead_tokens, std::optional<uint64_t> hash_seed) {
  const ModelSpec model =
      model_argument(model_arg, hash_overrides_argument(compressed_vocab_size, pad_id, dead_tokens, hash_seed));
  const TableHasher hasher = value_or_raise(TableHasher::create(model, layer_argument(model, layer)));
  const HostInt64Array tokens = host_int64_array(tokens_arg, "tokens", {1});
  std::vector<uint8_t> starts;
  if (!sequence_starts_arg.is_none()) {
    const py::array flags = py::module_::import("numpy").attr("asarray")(sequence_starts_arg);
    if (flags.ndim() != 1 || flags.size() != static_cast<py::ssize_t>(tokens.values.size()))
      throw py::value_error(fmt::format("sequence_starts: shape {}; give one flag per token ({} of them), nonzero "
                                        "where a sequence begins",
                                        py::str(py::object(flags.attr("shape"))).cast<std::string>(),
                                        tokens.values.size()));
    const py::array_t<uint8_t> nonzero = py::array(flags.attr("__ne__")(0)).attr("astype")("uint8");
    starts.assign(nonzero.data(), nonzero.data() + nonzero.size());
  }
  py::array_t<int64_t> row_ids =
      new_array<int64_t>({static_cast<int64_t>(tokens.values.size()), hasher.head_count()});
  std::span<int64_t> out = values_of(row_ids);
  Status hashed;
  {
    py::gil_scoped_release unlocked;
    hashed = hasher.hash(tokens.values, starts, out);
  }
  ok_or_raise(hashed);
  return row_ids;
}

// The engine's (or its variant's) rules for scale bytes and -0 set on the table.
void apply_engine_argument(const std::string& engine, bool summed, TableSpec& table) {
  Result<EngineChoice> id = parse_engine_choice(engine, "engine");
  ok_or_raise(id.status());
  const EngineProfile& profile = engine_profile(id->id, id->variant);
  table.scale_byte_rule = profile.scale_byte_rule;
  // A path that sums the owner's row with +0 from every other rank (SGLang's
  // all-reduce at tp > 1) makes -0 +0 where the engine's sum does; vLLM never sums.
  table.minus_zero = lookup_minus_zero(profile, summed);
}

py::array_t<uint16_t> reference_lookup(py::handle model_arg, int layer, py::handle row_ids_arg,
                                       const std::string& engine, uint64_t fill_seed, bool summed) {
  const ModelSpec model = model_argument(model_arg);
  TableSpec table = model.tables[static_cast<size_t>(layer_argument(model, layer))];
  apply_engine_argument(engine, summed, table);
  const HostInt64Array ids = host_int64_array(row_ids_arg, "row_ids", {1, 2});
  // [n, heads]: a row id per head of this layer (hash_ids' shape); any other width is a slip.
  if (ids.shape.size() == 2 && ids.shape[1] != table.head_count())
    raise_status(invalid_argument(fmt::format("row_ids: shape [{}, {}], but layer {} has {} heads; give [n, {}] (as "
                                              "hash_ids returns) or a flat [n]",
                                              ids.shape[0], ids.shape[1], layer, table.head_count(),
                                              table.head_count())));
  std::vector<int64_t> shape = ids.shape;
  shape.push_back(table.dim);
  py::array_t<uint16_t> out = new_array<uint16_t>(shape);
  std::span<uint16_t> values = values_of(out);
  {
    py::gil_scoped_release unlocked;
    kernels::filled_lookup_reference(table, fill_seed, ids.values, values);
  }
  return out;
}

py::array_t<uint8_t> table_rows(py::handle model_arg, int layer, int64_t first, int64_t count, uint64_t fill_seed) {
  const ModelSpec model = model_argument(model_arg);
  const TableSpec& table = model.tables[static_cast<size_t>(layer_argument(model, layer))];
  if (first < 0 || count < 0 || first > table.row_count() || count > table.row_count() - first)
    raise_status(invalid_argument(fmt::format(
        "first {}, count {}: rows {} are not inside layer {}'s table of {} rows; give 0 <= first and first + "
        "count <= {}",
        first, count, half_open_range_text(first, count), layer, table.row_count(), table.row_count())));
  if (static_cast<uint64_t>(count) > kMaxTableRowsBytes / table.row_bytes())
    raise_status(invalid_argument(fmt::format("count: {} rows of {} bytes are more than {} bytes at once; ask for at "
                                              "most {} rows a call",
                                              count, table.row_bytes(), kMaxTableRowsBytes,
                                              kMaxTableRowsBytes / table.row_bytes())));
  py::array_t<uint8_t> out = new_array<uint8_t>({count, static_cast<int64_t>(table.row_bytes())});
  std::span<uint8_t> bytes = values_of(out);
  {
    py::gil_scoped_release unlocked;
    fill_table_rows(table, fill_seed, first, std::as_writable_bytes(bytes));
  }
  return out;
}

// What a kernel of one's own needs to hash and read a layer's table.
py::dict model_info(py::handle model_arg, std::optional<int64_t> compressed_vocab_size, std::optional<int64_t> pad_id,
                    std::optional<std::string> dead_tokens, std::optional<uint64_t> hash_seed) {
  const ModelSpec model =
      model_argument(model_arg, hash_overrides_argument(compressed_vocab_size, pad_id, dead_tokens, hash_seed));
  py::list tables;
  for (size_t t = 0; t < model.tables.size(); ++t) {
    const TableSpec& table = model.tables[t];
    const TableHasher hasher = value_or_raise(TableHasher::create(model, static_cast<int>(t)));
    tables.append(py::dict("layer"_a = table.layer_id, "heads"_a = table.head_count(), "dim"_a = table.dim,
                           "row_format"_a = table.row_format == RowFormat::kBf16 ? "bf16" : "fp8_e4m3_ue8m0",
                           "row_bytes"_a = table.row_bytes(), "rows"_a = table.row_count(),
                           "head_orders"_a = hasher.head_orders(), "primes"_a = hasher.primes(),
                           "head_offsets"_a = hasher.offsets(), "multipliers"_a = hasher.multipliers()));
  }
  return py::dict("name"_a = model.name, "compressed_vocab_size"_a = model.compressed_vocab_size,
                  "pad_id"_a = model.pad_id, "dead_tokens"_a = std::string(dead_token_rule_name(model.dead_token_rule)),
                  "hash_seed"_a = model.seed, "tables"_a = tables);
}

}  // namespace

void add_oracle(py::module_& m) {
  m.def("hash_ids", &hash_ids, py::arg("tokens"), py::arg("model"), py::arg("layer"),
        py::arg("sequence_starts") = py::none(), py::kw_only(), ENGRAM_PYTHON_HASH_OVERRIDE_ARGS,
        R"(Row ids of compressed token ids for one Engram layer, bit for bit as the Engram reference and the engines
hash them (docs/design.md section 1).

tokens: int64 [n] in [0, compressed_vocab_size) or -1 (DEAD). model: a preset name or a model file's path. layer:
an Engram layer id of the model (e.g. 1 or 14). sequence_starts: None (one sequence), or one flag per token,
nonzero where a new sequence begins. The keywords set the model's token space (its pad id, DEAD rule, ...).
Returns int64 [n, heads].)");
  m.def("reference_lookup", &reference_lookup, py::arg("model"), py::arg("layer"), py::arg("row_ids"),
        py::arg("engine") = "engramlab", py::arg("fill_seed") = 1, py::arg("summed") = false,
        R"(The bitwise CPU reference of the lookup: each id's row of the filled test table (fill_seed, as the
runtime fills it), dequantised to bf16 under the engine's rules (engine: "engramlab", "vllm", "sglang" or a variant
such as "sglang+torch-fallback"): scale bytes 0 / 255 ("engramlab" and "vllm": +0 / +inf; "sglang": 2^-127 / +inf,
its CUDA kernel; "sglang+torch-fallback": 2^-127 / NaN); -0 written as +0 under "engramlab", kept under "vllm" (it
never sums rows) and under "sglang" unless summed=True (a path that all-reduces the row with +0 from the other ranks:
SGLang's device_collective and per_rank layout over more than one rank; EngramTables.facts["rows_summed"] says
whether a rank's lookup does); a NaN as 0x7fc0 carrying its FP8 byte's sign; DEAD (-1) and out-of-table ids give a
zero row. row_ids: int64 [n] or [n, heads]. Returns the bf16 bits as uint16 [*row_ids.shape, dim] (the package's
reference_lookup(..., dtype=torch.bfloat16) gives a torch tensor).)");
  m.def("table_rows", &table_rows, py::arg("model"), py::arg("layer"), py::arg("first"), py::arg("count"),
        py::arg("fill_seed") = 1,
        R"(The stored bytes of rows [first, first + count) of a layer's filled test table (core/model/table_fill.h):
uint8 [count, row_bytes]; an FP8 row is dim E4M3 bytes then dim/32 UE8M0 scale bytes, a bf16 row dim values.)");
  m.def("model_info", &model_info, py::arg("model"), py::kw_only(), ENGRAM_PYTHON_HASH_OVERRIDE_ARGS,
        R"(A model's token space and, per Engram layer, what a kernel of one's own needs: heads, dim, row format
and bytes, rows, and per head its n-gram order, prime and row offset, with the layer's hash multipliers.)");
}

}  // namespace engram::python
