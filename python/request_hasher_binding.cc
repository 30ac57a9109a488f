// engramlab.RequestHasher: core/model/request_hasher.h on numpy arrays. A
// batch is ragged as engines send it: one token array and runs [n, 3] of
// (slot, first token, token count); tokens no run covers are padding.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pybind11/stl.h>  // std::optional and std::vector arguments

#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "core/model/request_hasher.h"
#include "python/arguments.h"
#include "python/errors.h"
#include "python/model_arguments.h"
#include "python/module_parts.h"

namespace engram::python {
namespace {

// Rows of `columns` int64 values ([n, columns]; an empty list or array is no
// rows).
std::vector<std::vector<int64_t>> int64_rows(py::handle object, const char* name, int columns) {
  const HostInt64Array array = host_int64_array(object, name, {1, 2});
  if (array.values.empty()) return {};
  if (array.shape.size() != 2 || array.shape[1] != columns)
    throw py::value_error(fmt::format("{}: shape ({}); give [n, {}] int64 rows", name,
                                      fmt::join(array.shape, ", "), columns));
  std::vector<std::vector<int64_t>> rows;
  for (int64_t r = 0; r < array.shape[0]; ++r)
    rows.emplace_back(array.values.begin() + r * columns, array.values.begin() + (r + 1) * columns);
  return rows;
}

int32_t slot_value(int64_t slot, const char* name, size_t row) {
  if (slot < INT32_MIN || slot > INT32_MAX)
    throw py::value_error(fmt::format("{}[{}]: slot {} is outside int32; slots are 0 .. slot count - 1, or -1 for "
                                      "an idle DP slot",
                                      name, row, slot));
  return static_cast<int32_t>(slot);
}

std::vector<RequestRun> runs_argument(py::handle object) {
  std::vector<RequestRun> runs;
  size_t r = 0;
  for (const std::vector<int64_t>& row : int64_rows(object, "runs", 3))
    runs.push_back({slot_value(row[0], "runs", r++), row[1], row[2]});
  return runs;
}

using BatchStep = Status (RequestHasher::*)(std::span<const int64_t>, std::span<const RequestRun>, std::span<int64_t>);

py::array_t<int64_t> hash_batch(RequestHasher& hasher, BatchStep step, py::handle tokens_arg, py::handle runs_arg) {
  const HostInt64Array tokens = host_int64_array(tokens_arg, "tokens", {1});
  const std::vector<RequestRun> runs = runs_argument(runs_arg);
  py::array_t<int64_t> row_ids =
      new_array<int64_t>({static_cast<int64_t>(tokens.values.size()), hasher.table_hasher().head_count()});
  ok_or_raise((hasher.*step)(tokens.values, runs, values_of(row_ids)));
  return row_ids;
}

const char* state_name(RequestHasher::SlotState state) {
  switch (state) {
    case RequestHasher::SlotState::kFree: return "free";
    case RequestHasher::SlotState::kActive: return "active";
    case RequestHasher::SlotState::kVerifyPending: return "verify_pending";
  }
  return "?";
}

void check_slot(const RequestHasher& hasher, int slot) {
  if (slot < 0 || slot >= hasher.slot_count())
    raise_status(invalid_argument(
        fmt::format("slot: {} is not a slot of this hasher; give 0 .. {}", slot, hasher.slot_count() - 1)));
}

}  // namespace

void add_request_hasher(py::module_& m) {
  py::class_<RequestHasher>(m, "RequestHasher", R"(Hash ids step by step, as engines compute them
(docs/design.md section 10): per request slot the last max-order - 1 ids, and the operations engines perform on a
batch. However a sequence is cut (prefill chunks, decode steps, a cached prefix, lookback ids from another
instance, verify blocks with rejected drafts) the ids equal hash_ids over the accepted sequence whole. A refused
step (InvalidArgumentError naming the request and the field) changes no history.)")
      .def(py::init([](py::handle model_arg, int layer, int slots, std::optional<int64_t> compressed_vocab_size,
                       std::optional<int64_t> pad_id, std::optional<std::string> dead_tokens,
                       std::optional<uint64_t> hash_seed) {
             const ModelSpec model = model_argument(
                 model_arg, hash_overrides_argument(compressed_vocab_size, pad_id, dead_tokens, hash_seed));
             TableHasher table_hasher = value_or_raise(TableHasher::create(model, layer_argument(model, layer)));
             return std::make_unique<RequestHasher>(
                 value_or_raise(RequestHasher::create(std::move(table_hasher), slots)));
           }),
           py::arg("model"), py::arg("layer"), py::arg("slots"), py::kw_only(), ENGRAM_PYTHON_HASH_OVERRIDE_ARGS)
      .def_property_readonly("slots", &RequestHasher::slot_count)
      .def_property_readonly("heads", [](const RequestHasher& h) { return h.table_hasher().head_count(); })
      .def_property_readonly("history_length", [](const RequestHasher& h) { return h.table_hasher().history_length(); })
      .def(
          "begin",
          [](RequestHasher& h, int slot, py::handle preceding) {
            std::vector<int64_t> ids;
            if (!preceding.is_none()) {
              const HostInt64Array array = host_int64_array(preceding, "preceding_ids", {1});
              ids.assign(array.values.begin(), array.values.end());
            }
            ok_or_raise(h.begin(slot, ids));
          },
          py::arg("slot"), py::arg("preceding_ids") = py::none(),
          "A new request on a free slot; preceding_ids (oldest first): a cached prefix or the lookback ids another "
          "instance handed over (None: a fresh sequence).")
      .def(
          "extend",
          [](RequestHasher& h, py::handle tokens, py::handle runs) {
            return hash_batch(h, &RequestHasher::extend, tokens, runs);
          },
          py::arg("tokens"), py::arg("runs"),
          "Hashes each run's tokens after its slot's history and appends them (a prefill chunk, a decode token). "
          "tokens: int64 [n]; runs: int64 [r, 3] (slot, first token, token count; slot -1: an idle DP slot). "
          "Returns int64 [n, heads]; uncovered and idle tokens hash to DEAD (-1).")
      .def(
          "verify",
          [](RequestHasher& h, py::handle tokens, py::handle runs) {
            return hash_batch(h, &RequestHasher::verify, tokens, runs);
          },
          py::arg("tokens"), py::arg("runs"),
          "Hashes each run as a verify block (anchor, then drafts) after its slot's history, which stays as it "
          "was until commit(). Blocks may differ in length.")
      .def(
          "commit",
          [](RequestHasher& h, py::handle commits_arg) {
            std::vector<VerifyCommit> commits;
            size_t r = 0;
            for (const std::vector<int64_t>& row : int64_rows(commits_arg, "commits", 2))
              commits.push_back({slot_value(row[0], "commits", r++), row[1]});
            ok_or_raise(h.commit(commits));
          },
          py::arg("commits"),
          "commits: int64 [r, 2] (slot, accepted drafts): the anchor and the accepted drafts of each slot's "
          "pending block join its history.")
      .def(
          "release", [](RequestHasher& h, int slot) { ok_or_raise(h.release(slot)); }, py::arg("slot"),
          "The slot is free again; a pending block is dropped.")
      .def(
          "history",
          [](const RequestHasher& h, int slot) {
            check_slot(h, slot);
            const std::span<const int64_t> history = h.history(slot);
            py::array_t<int64_t> out = new_array<int64_t>({static_cast<int64_t>(history.size())});
            std::copy(history.begin(), history.end(), values_of(out).begin());
            return out;
          },
          py::arg("slot"), "The slot's history, newest first (history_length ids).")
      .def(
          "state",
          [](const RequestHasher& h, int slot) {
            check_slot(h, slot);
            return state_name(h.state(slot));
          },
          py::arg("slot"), "'free', 'active' or 'verify_pending'.");
}

}  // namespace engram::python
