#include "harness/scenario_rank.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/bf16.h"
#include "core/base/coverage_probe.h"
#include "core/base/splitmix64.h"

namespace engram::harness {
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
  options.engine = completed.engine;
  options.job_id = std::move(job_id);
  options.fill_seed = kScenarioFillSeed;
  return options;
}

std::vector<int64_t> scenario_tokens(const ModelSpec& model, uint64_t seed, int replica, int tokens) {
  std::vector<int64_t> out(static_cast<size_t>(std::max(tokens, 0)));
  for (int t = 0; t < tokens; ++t)
    out[static_cast<size_t>(t)] =
        t % 5 == 4 ? kDeadId
                   : static_cast<int64_t>(splitmix64_at(seed ^ 0x70c3e5ull, static_cast<uint64_t>(replica) * 65536 + t) %
                                          static_cast<uint64_t>(model.compressed_vocab_size));
  return out;
}

std::vector<ScenarioBatch> scenario_batches(const ScenarioLookup& lookup, int dp) {
  if (!lookup.batches.empty()) return lookup.batches;
  ScenarioBatch step;
  for (int d = 0; d < dp; ++d) step.tokens_by_replica.push_back(d % 4 == 3 ? 0 : lookup.tokens);
  return {step};
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
    const ParallelLayout& layout = inputs.options.layout;
    const int replica = r / layout.tp;
    const int tp_rank = r % layout.tp;
    const bool sequence_parallel = inputs.options.config.sequence_parallel && layout.tp > 1;
    const std::vector<ScenarioBatch> batches = scenario_batches(inputs.lookup, layout.dp);
    for (size_t b = 0; b < batches.size(); ++b) {
      const ScenarioBatch& batch = batches[b];
      const int slot = std::max(1, *std::max_element(batch.tokens_by_replica.begin(), batch.tokens_by_replica.end()));
      const bool dead = std::find(batch.dead_replicas.begin(), batch.dead_replicas.end(), replica) !=
                        batch.dead_replicas.end();
      const std::vector<int64_t> tokens = scenario_tokens(model, inputs.seed ^ (b * 0x9e37ull), replica,
                                                          batch.tokens_by_replica[static_cast<size_t>(replica)]);
      for (size_t t = 0; t < model.tables.size(); ++t) {
        const TableSpec& table = model.tables[t];
        const size_t heads = static_cast<size_t>(table.head_count());
        const size_t token_values = heads * static_cast<size_t>(table.dim);
        std::vector<int64_t> ids(tokens.size() * heads);
        Status hashed = (*inputs.hashers)[t].hash(tokens, {}, ids);
        ENGRAM_CHECK(hashed.is_ok());
        if (dead) {
          std::fill(ids.begin(), ids.end(), kDeadId);  // a replica of image tokens / idle slots only
        } else {
          // One id past the table and one DEAD id (the engines' hash yields
          // neither): a zero row on every path, never row 0.
          if (!ids.empty()) ids.back() = table.row_count() + replica;
          if (ids.size() >= 2) ids.front() = kDeadId;
        }
        // This TP rank's token shard under sequence parallelism, zero-padded.
        const size_t token_count = tokens.size();
        const size_t shard = sequence_parallel ? (token_count + static_cast<size_t>(layout.tp) - 1) /
                                                     static_cast<size_t>(layout.tp)
                                               : token_count;
        const size_t first = sequence_parallel ? static_cast<size_t>(tp_rank) * shard : 0;
        std::vector<uint16_t> got(shard * token_values, 0xdead);
        Status looked = runtime->lookup(static_cast<int>(t), ids, slot, got);
        if (!looked.is_ok()) {
          runtime->stop().ignore();
          return looked;
        }
        // Where the rank's device can read a host placement's table (through
        // its registration), it does, and gives the same bytes; a device
        // placement's lookup above already went through the device.
        const bool device_reads_host_table = !is_device_placement(out.placement) && runtime->device_lookup_ready();
        if (device_reads_host_table) {
          std::vector<uint16_t> on_device(got.size(), 0xbeef);
          Status device_looked = runtime->lookup_through_device(static_cast<int>(t), ids, slot, on_device);
          if (!device_looked.is_ok()) {
            runtime->stop().ignore();
            return device_looked;
          }
          coverage_probe<"lookup: a host table read by the device">();
          if (out.lookup_mismatch.empty()) {
            std::string diff = first_difference(got, on_device, table.dim);
            if (!diff.empty())
              out.lookup_mismatch = fmt::format("step {}, table {} (layer {}), the device's read of the host table: {}",
                                                b, t, table.layer_id, diff);
          }
        }
        out.lookup_hashes.push_back(fnv1a64(std::as_bytes(std::span<const uint16_t>(got))));
        std::vector<uint16_t> every_token(ids.size() * static_cast<size_t>(table.dim));
        inputs.reference(static_cast<int>(t), ids, every_token);
        std::vector<uint16_t> want(got.size(), 0);
        for (size_t k = 0; k < shard && first + k < token_count; ++k)
          std::copy_n(every_token.begin() + static_cast<std::ptrdiff_t>((first + k) * token_values), token_values,
                      want.begin() + static_cast<std::ptrdiff_t>(k * token_values));
        if (out.lookup_mismatch.empty()) {
          std::string diff = first_difference(want, got, table.dim);
          if (!diff.empty())
            out.lookup_mismatch = fmt::format("step {}, table {} (layer {}): {}", b, t, table.layer_id, diff);
        }
      }
    }
    out.looked_up = true;
  }
  return runtime->stop();
}

}  // namespace engram::harness
