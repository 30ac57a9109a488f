#include "harness/scenario_rank.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/splitmix64.h"
#include "core/deployment/cp_groups.h"
#include "core/lookup/cp_halo.h"
#include "harness/lookup_steps.h"
#include "harness/scenario_rank_lookup.h"
#include "harness/scenario_rank_steps.h"

namespace engram::harness {

CompiledSteps compile_scenario_steps(const ScenarioRankInputs& inputs) {
  return compile_lookup_steps(inputs.lookup.steps, inputs.hashers->front(), cp_halo_length(*inputs.hashers) + 1,
                              inputs.seed, inputs.options.layout);
}

namespace {

// The batches of lookup.tokens / lookup.batches. With a CP group (prefill_cp
// above 1) the group's replicas hold one sequence, in CP rank order, each
// rank its replica's token count of it, hashed after the group's halos.
Status run_batches(const ScenarioRankInputs& inputs, int world_rank, Collectives* cp_group, const CpGroup& cp,
                   RankLookups& lookups) {
  const ModelSpec& model = inputs.options.table_model;
  const ParallelLayout& layout = inputs.options.layout;
  const int replica = world_rank / layout.tp;
  const std::vector<ScenarioBatch> batches = scenario_batches(inputs.lookup, layout.dp);
  for (size_t b = 0; b < batches.size(); ++b) {
    const ScenarioBatch& batch = batches[b];
    const std::string label = fmt::format("step {}", b);
    const int slot = std::max(1, *std::max_element(batch.tokens_by_replica.begin(), batch.tokens_by_replica.end()));
    const bool dead = std::find(batch.dead_replicas.begin(), batch.dead_replicas.end(), replica) !=
                      batch.dead_replicas.end();
    const uint64_t seed = inputs.seed ^ (b * 0x9e37ull);
    const int mine = batch.tokens_by_replica[static_cast<size_t>(replica)];
    std::vector<int64_t> tokens, context;
    std::optional<CpHalo> halo;
    if (cp_group != nullptr) {
      const int first_replica = replica - cp.cp_rank;
      int total = 0, offset = 0;
      for (int c = 0; c < layout.prefill_cp; ++c) {
        const int n = batch.tokens_by_replica[static_cast<size_t>(first_replica + c)];
        if (c < cp.cp_rank) offset += n;
        total += n;
      }
      const std::vector<int64_t> sequence = scenario_tokens(model, seed, first_replica, total);
      context.assign(sequence.begin(), sequence.begin() + offset);
      tokens.assign(sequence.begin() + offset, sequence.begin() + offset + mine);
      ENGRAM_ASSIGN_OR_RETURN(halo, exchange_cp_halo(*cp_group, cp.world_ranks, cp_halo_length(*inputs.hashers), tokens));
    } else {
      tokens = scenario_tokens(model, seed, replica, mine);
    }
    for (size_t t = 0; t < model.tables.size(); ++t) {
      const TableSpec& table = model.tables[t];
      const TableHasher& hasher = (*inputs.hashers)[t];
      std::vector<int64_t> ids(tokens.size() * static_cast<size_t>(table.head_count()));
      if (halo) {
        ENGRAM_RETURN_IF_ERROR(hash_cp_shard(*halo, cp.cp_rank, hasher, {}, tokens, ids));
        lookups.check_ids(static_cast<int>(t), context, tokens, ids, label);
      } else {
        const Status hashed = hasher.hash(tokens, {}, ids);
        ENGRAM_CHECK(hashed.is_ok());
      }
      if (dead) {
        std::fill(ids.begin(), ids.end(), kDeadId);  // a replica of image tokens / idle slots only
      } else {
        // One id past the table and one DEAD id (the engines' hash yields
        // neither): a zero row on every path, never row 0.
        if (!ids.empty()) ids.back() = table.row_count() + replica;
        if (ids.size() >= 2) ids.front() = kDeadId;
      }
      ENGRAM_RETURN_IF_ERROR(lookups.lookup(static_cast<int>(t), ids, slot, label));
    }
  }
  return Status::ok();
}

// Everything the rank looks up: its batches or its steps.
Status run_lookups(RankBackend& backend, EngramRuntime& runtime, const ScenarioRankInputs& inputs,
                   ScenarioRankResult& out) {
  const ParallelLayout& layout = inputs.options.layout;
  const int r = backend.world_rank;
  RankLookups lookups(runtime, inputs, r, out, backend.step_clock);
  std::optional<CompiledSteps> own_steps;
  const CompiledSteps* steps = inputs.compiled_steps.get();
  if (steps == nullptr && inputs.lookup.steps.any()) {
    own_steps = compile_scenario_steps(inputs);
    steps = &*own_steps;
  }
  const bool needs_cp_group =
      layout.prefill_cp > 1 &&
      (!steps || std::any_of(steps->ops.begin(), steps->ops.end(), [](const LookupOp& op) { return op.cp.has_value(); }));
  ENGRAM_RETURN_IF_ERROR(check_prefill_cp(layout).with_context(r, -1, "lookup"));
  const CpGroup cp = cp_group_of(layout, r);
  std::unique_ptr<Collectives> cp_group;
  if (needs_cp_group) {
    ENGRAM_ASSIGN_OR_RETURN(cp_group, backend.world->split(cp.index, cp.cp_rank));
  }
  if (steps) return run_lookup_steps(*steps, inputs, r, cp_group.get(), cp, lookups);
  return run_batches(inputs, r, cp_group.get(), cp, lookups);
}

}  // namespace

RuntimeOptions scenario_runtime_options(const Deployment& completed, const ModelSpec& table_model, std::string job_id,
                                        std::string shm_name_part) {
  RuntimeOptions options;
  options.placement_model = completed.model;
  options.table_model = table_model;  // the runtime applies the engine's rules for its path
  options.layout = completed.layout;
  options.config = completed.config;
  options.engine = completed.engine;
  options.job_id = std::move(job_id);
  options.shm_name_part = std::move(shm_name_part);
  options.fill_seed = kScenarioFillSeed;
  return options;
}

const kernels::DirectTables& scenario_direct_tables(const ScenarioLookup& lookup, const ModelSpec& table_model) {
  return kernels::direct_tables(lookup.model + lookup.model_hash.to_text(), table_model, kScenarioFillSeed);
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
  ENGRAM_ASSIGN_OR_RETURN(auto runtime, EngramRuntime::start(backend, inputs.options, sink));
  out.started = true;
  out.placement = runtime->placement();
  out.handle_type = runtime->facts().handle_type;
  if (inputs.lookup.run) {
    Status looked = run_lookups(backend, *runtime, inputs, out);
    if (!looked.is_ok()) {
      runtime->stop().ignore();
      return looked;
    }
    out.looked_up = true;
  }
  return runtime->stop();
}

}  // namespace engram::harness
