// What one rank of a scenario does, on the emulator and on real processes
// alike (one implementation, so the two can be compared byte for byte):
// EngramRuntime::start with options from the scenario's deployment, per
// step a lookup of its replica's tokens in every table (deterministic token
// ids, a few DEAD, one id past the table; a DEAD replica all DEAD), each
// output (this TP rank's token shard under sequence parallelism) checked
// against a reference lookup and hashed, then stop. With layout.prefill_cp
// above 1 a batch is one sequence per CP group, each rank hashing its shard
// after the halos its CP group trades (core/lookup/cp_halo.h); with
// lookup.steps the ids come from a request hasher step by step
// (harness/scenario_rank_steps.h). Either way the ids are checked against
// the sequence hashed whole.
#pragma once

#include "kernels/direct_table_reference.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/backend/rank_backend.h"
#include "core/deployment/deployment.h"
#include "core/runtime/engram_runtime.h"
#include "core/model/hashing.h"
#include "core/placements/placement.h"
#include "harness/lookup_steps.h"
#include "harness/scenario.h"
#include "core/base/status.h"
#include "core/model/table_spec.h"
#include "core/base/warnings.h"

namespace engram::harness {

inline constexpr uint64_t kScenarioFillSeed = 1;  // RuntimeOptions' default: the reference fills the same bytes

struct ScenarioRankResult {
  bool started = false;
  Placement placement = Placement::kDeviceCollective;
  std::optional<HandleType> handle_type;
  bool looked_up = false;                // every table of the lookup model
  std::string lookup_mismatch;           // empty: bitwise equal to the reference lookup
  std::vector<uint64_t> lookup_hashes;   // fnv1a64 of each table's output bytes, by table index
  // Ids hashed across steps or CP ranks, against the accepted sequence
  // hashed whole: tokens checked (per table) and the first difference.
  uint64_t ids_checked = 0;
  std::string ids_mismatch;
};

// ids: [tokens][heads] of table `table`; out: ids.size() * dim bf16, decoded
// by `decoded_as`'s rules (the rank's runtime's: EngramRuntime::table_model()).
using ReferenceLookup = std::function<void(int table, const TableSpec& decoded_as, std::span<const int64_t> ids,
                                           std::span<uint16_t> out)>;

struct ScenarioRankInputs {
  RuntimeOptions options;            // scenario_runtime_options()
  ScenarioLookup lookup;
  uint64_t seed = 1;                 // the scenario's: decides the token ids
  const std::vector<TableHasher>* hashers = nullptr;  // one per table of options.table_model
  ReferenceLookup reference;         // required when lookup.run
  // lookup.steps compiled once for every rank of this process (the
  // emulator's): a `split: every` step over P CP ranks is P ops of P shards,
  // so a copy per rank grew as P^3. Null: each rank compiles its own.
  std::shared_ptr<const CompiledSteps> compiled_steps;
};

// lookup.steps compiled as each rank of `inputs` would (the hashers, seed and layout of `inputs`).
CompiledSteps compile_scenario_steps(const ScenarioRankInputs& inputs);

// The deployment must be completed (plan's or validate_and_complete's output).
// job_id and shm_name_part name the host-wide files (RuntimeOptions).
RuntimeOptions scenario_runtime_options(const Deployment& completed, const ModelSpec& table_model, std::string job_id,
                                        std::string shm_name_part);

// The direct lookup every rank is checked against: the scenario's tables
// filled as the runtime fills them (built once per process and model), each
// lookup decoded by the rules the rank's runtime decodes by (the planning
// engine's scale bytes, and its -0 rule on the rank's path).
const kernels::DirectTables& scenario_direct_tables(const ScenarioLookup& lookup, const ModelSpec& table_model);

// Replica d's `tokens` tokens: every fifth is DEAD (an image token); ids
// from the seed and the replica (every TP rank of a replica brings them).
std::vector<int64_t> scenario_tokens(const ModelSpec& model, uint64_t seed, int replica, int tokens);

// The steps a scenario looks up: its batches, or one step of lookup.tokens
// per replica in which every fourth replica is idle.
std::vector<ScenarioBatch> scenario_batches(const ScenarioLookup& lookup, int dp);

// FNV-1a, 64 bit.
uint64_t fnv1a64(std::span<const std::byte> bytes);

// Collective over backend.world. Fills `out` as far as the rank got; returns
// the first failure (start, lookup or stop).
Status run_scenario_rank(RankBackend& backend, const ScenarioRankInputs& inputs, WarningSink& sink,
                         ScenarioRankResult& out);

}  // namespace engram::harness
