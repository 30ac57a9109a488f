#include "harness/scenario_rank.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/bf16.h"
#include "core/base/splitmix64.h"

namespace engram {
namespace {

std::string first_difference(std::span<const uint16_t> want, std::span<const uint16_t> got, int dim) {
  for (size_t i = 0; i < want.size(); ++i)
    if (!bf16_same(want[i], got[i]))
      return fmt::format("value {} (row entry {}, element {}): direct 0x{:04x}, placement 0x{:04x}", i,
                         i / static_cast<size_t>(dim), i % static_cast<size_t>(dim), want[i], got[i]);
  return {};
}

}  // namespace

RuntimeOptions scenario_runtime_options(const Deployment& completed, const ModelSpec& table_model, std::string job_id) {
  RuntimeOptions options;
  options.placement_model = completed.model;
  options.table_model = table_model;
  options.layout = completed.layout;
  options.config = completed.config;
  options.job_id = std::move(job_id);
  options.fill_seed = kScenarioFillSeed;
  return options;
}

std::vector<int64_t> scenario_tokens(const ModelSpec& model, uint64_t seed, int rank, int tokens) {
  const int count = rank % 4 == 3 ? 0 : tokens;
  std::vector<int64_t> out(static_cast<size_t>(std::max(count, 0)));
  for (int t = 0; t < count; ++t)
    out[static_cast<size_t>(t)] =
        t % 5 == 4 ? kDeadId
                   : static_cast<int64_t>(splitmix64_at(seed ^ 0x70c3e5ull, static_cast<uint64_t>(rank) * 65536 + t) %
                                          static_cast<uint64_t>(model.compressed_vocab_size));
  return out;
}

uint64_t fnv1a64(std::span<const std::byte> bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) hash = (hash ^ static_cast<uint64_t>(b)) * 0x100000001b3ull;
  return hash;
}

Status run_scenario_rank(RankBackend& backend, const ScenarioRankInputs& inputs, WarningSink& sink,
                         ScenarioRankResult& out) {
  const ModelSpec& model = inputs.options.table_model;
  ENGRAM_CHECK(!inputs.lookup.run ||
               (inputs.hashers != nullptr && inputs.hashers->size() == model.tables.size() && inputs.reference));
  const int r = backend.world_rank;
  ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(backend, inputs.options, sink));
  out.started = true;
  out.placement = runtime->placement();
  out.handle_type = runtime->facts().handle_type;
  if (inputs.lookup.run) {
    const int slot = std::max(1, inputs.lookup.tokens);
    const std::vector<int64_t> tokens = scenario_tokens(model, inputs.seed, r, inputs.lookup.tokens);
    for (size_t t = 0; t < model.tables.size(); ++t) {
      const TableSpec& table = model.tables[t];
      const size_t heads = static_cast<size_t>(table.head_count());
      std::vector<int64_t> ids(tokens.size() * heads);
      Status hashed = (*inputs.hashers)[t].hash(tokens, {}, ids);
      ENGRAM_CHECK(hashed.is_ok());
      // One id past the table and one DEAD id (the engines' hash yields
      // neither): a zero row on every path, never row 0.
      if (!ids.empty()) ids.back() = table.row_count() + r;
      if (ids.size() >= 2) ids.front() = kDeadId;
      std::vector<uint16_t> got(ids.size() * static_cast<size_t>(table.dim), 0xdead);
      Status looked = runtime->lookup(static_cast<int>(t), ids, slot, got);
      if (!looked.is_ok()) {
        runtime->stop().ignore();
        return looked;
      }
      out.lookup_hashes.push_back(fnv1a64(std::as_bytes(std::span<const uint16_t>(got))));
      std::vector<uint16_t> want(got.size());
      inputs.reference(static_cast<int>(t), ids, want);
      if (out.lookup_mismatch.empty()) {
        std::string diff = first_difference(want, got, table.dim);
        if (!diff.empty()) out.lookup_mismatch = fmt::format("table {} (layer {}): {}", t, table.layer_id, diff);
      }
    }
    out.looked_up = true;
  }
  return runtime->stop();
}

}  // namespace engram
