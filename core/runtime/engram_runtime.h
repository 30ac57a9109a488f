// One rank's Engram tables at run time: gather the facts every rank needs
// (host identity, /dev/shm total), decide the placement with the same rules
// `plan` uses, join the placement's group and the host's, have the placement
// build its tables on the backend (core/placements/: VMM shards, /dev/shm
// segments, private copies), answer lookups, and tear everything down. The
// runtime knows no placement by name: it asks the registration table.
//
// The same code runs in the emulator (sim/world.h) and on real processes
// (backends/shm + backends/ipc), so a scenario gives the same placement,
// warnings and lookup bytes on both.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/backend/rank_backend.h"
#include "core/deployment/deployment.h"
#include "core/placements/placement.h"
#include "core/base/status.h"
#include "core/model/table_spec.h"
#include "core/base/warnings.h"

namespace engram {

struct PlanResult;  // core/plan/deployment_plan.h

struct RuntimeOptions {
  // The model preset whose sizes decide the placement (the /dev/shm rule
  // compares the tmpfs total with its tables), exactly as `plan` decides.
  std::string placement_model = "deepseek-v4.1-flash";
  // Tables that are really built, filled and looked up. Tests and the
  // emulator use a small model of the same structure; a real run uses the
  // placement model itself.
  ModelSpec table_model;
  ParallelLayout layout;
  EngramConfig config;
  // What the engine takes from each GPU: the memory fit refuses nothing left
  // for the KV cache as `plan` does (unless negative_kv_allowed).
  EngineMemory engine;
  std::string job_id = "job";  // names /dev/shm segments: engramlab-<job_id>-<part>-layer<id>
  // <part>: 16 hex no other user can guess; real ranks set LaunchEnv's, the
  // emulator keeps the fixed one (core/backend/host_shared_memory.h).
  std::string shm_name_part = std::string(kFixedShmNamePart);
  uint64_t fill_seed = 1;      // core/model/table_fill.h: identical bytes on every rank
  // The host writer fills a /dev/shm table in chunks of about this many bytes
  // with an agreement after each, so readers never wait on one collective for
  // the whole fill (minutes for 188.8 GiB; a collective's deadline is less).
  uint64_t host_fill_chunk_bytes = 1ull << 30;
  // device_peer also builds the collective over its shards, for
  // lookup_device_collective (a check of the two paths on the same rows).
  bool collective_cross_check = false;
};

struct RuntimeFacts {
  Placement placement = Placement::kDeviceCollective;
  std::string reason;
  int node_local_group_size = 1;
  int host_index = -1;               // dense, by host identity in rank order
  int host_count = 0;
  std::optional<HandleType> handle_type;  // device_peer
  uint64_t device_bytes = 0;         // this rank's VMM allocations
  uint64_t host_bytes = 0;           // this rank's private host memory (shared segments not counted)
  uint64_t shared_host_bytes = 0;    // /dev/shm segments this rank created (its node's copy)
  double host_fill_seconds = 0;      // PlacementFootprint's: host rows filled, and registered with the device
  double device_register_seconds = 0;
  // Some ranks share a GPU (the gathered facts: several ranks of one host on
  // one GPU bus id, which they open only when told to): no NCCL is set up.
  bool ranks_share_gpus = false;
  // This rank's lookup sums its placement group's rows (over more than one
  // member): where the engine's sum adds +0 (SGLang), -0 comes back +0.
  bool rows_summed = false;
};

class EngramRuntime {
 public:
  // Collective over backend.world. Errors: invalid_argument (options),
  // failed_precondition (explicit dp_shared_memory: true that cannot work:
  // every rank returns the same error), and whatever a step on the backend
  // returns, with rank and step. Warnings go to `sink` (once per process).
  static Result<std::unique_ptr<EngramRuntime>> start(RankBackend& backend, const RuntimeOptions& options,
                                                      WarningSink& sink);
  ~EngramRuntime();  // local clean-up if stop() was not called
  EngramRuntime(const EngramRuntime&) = delete;
  EngramRuntime& operator=(const EngramRuntime&) = delete;

  const RuntimeFacts& facts() const { return facts_; }
  Placement placement() const { return facts_.placement; }
  // The tables as this rank's lookups decode them: the engine's scale-byte
  // rule and its -0 rule for this rank's path (apply_engine_value_rules with
  // facts().rows_summed), so a reference can read them alike.
  const ModelSpec& table_model() const { return options_.table_model; }

  // Collective over the placement's group, and above TP1 for the host
  // placements over the replica's TP ranks (every rank calls it, also with
  // no tokens). row_ids: [tokens][heads] of table `table_index`, the same
  // on every TP rank of a replica; output: tokens x heads x dim bf16, or
  // with config.sequence_parallel this TP rank's token shard of
  // ceil(tokens / tp) tokens, zero-padded.
  Status lookup(int table_index, std::span<const int64_t> row_ids, int64_t tokens_per_rank_max,
                std::span<uint16_t> output);

  // The device lookup (core/lookup/device_lookup.h): request.row_ids and
  // request.output in this rank's device memory, enqueued on
  // request.stream, nothing allocated or synchronised inside (capturable in
  // a CUDA graph). Every placement has it where the rank has a device
  // (backend.compute); collective over the placement's group where its
  // lookup is. request.table is set by the runtime; the slot must be at
  // most config.tokens_per_rank_max, which sized the buffers. With
  // config.sequence_parallel only a placement that trades token shards
  // (PlacementOps::trades_token_shards: device_head_sharded) has it, and
  // request.output then holds this TP rank's token shard, as lookup()'s
  // (the runtime sets request.sequence_parallel_shards); the others answer
  // failed_precondition.
  Status lookup_device(int table_index, DeviceLookupRequest request);
  // device_peer started with collective_cross_check: the same lookup
  // through the collective over the same shards (a check of both paths).
  Status lookup_device_collective(int table_index, DeviceLookupRequest request);

  // The device lookup from host spans, for callers without device buffers
  // of their own (scenarios, checks): the ids uploaded, lookup_device, the
  // output downloaded, through staging buffers made on first use and given
  // back by stop(). For a host placement this is the GPU reading the
  // registered host table; for a device placement it is what lookup() does
  // (output as lookup()'s). Collective as lookup_device; failed_precondition
  // without a DeviceCompute.
  Status lookup_through_device(int table_index, std::span<const int64_t> row_ids, int64_t tokens_per_rank_max,
                               std::span<uint16_t> output);
  // Whether lookup_device can run here (a DeviceCompute, and a device lookup
  // the placement has for this layout and config); where not, it answers
  // failed_precondition saying why.
  bool device_lookup_ready() const;
  // Whether lookup_device_collective can run: device_peer started with
  // collective_cross_check where no ranks share a GPU.
  bool collective_cross_check_built() const;

  // Collective: releases every segment, mapping and allocation.
  Status stop();

  struct State;  // groups and the placement's tables; defined in the .cc

 private:
  EngramRuntime(RankBackend& backend, RuntimeOptions options);
  Status join_groups(const PlanResult& plan, int host_writer_world_rank);
  Status build_tables();
  // Sequence parallelism on a device placement: the whole-token lookup, cut to this TP rank's shard.
  Status lookup_token_shard(int table_index, std::span<const int64_t> row_ids, int64_t tokens_per_rank_max,
                            std::span<uint16_t> output);
  RankBackend& backend_;
  RuntimeOptions options_;
  RuntimeFacts facts_;
  std::unique_ptr<State> state_;
  bool stopped_ = false;
};

}  // namespace engram
