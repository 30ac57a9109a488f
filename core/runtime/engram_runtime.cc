#include "core/runtime/engram_runtime.h"

#include "core/engines/engine_profile.h"

#include "core/placements/host_lookup_staging.h"
#include "core/base/text_excerpt.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/plan/deployment_plan.h"
#include "core/runtime/shared_plan.h"

namespace engram {
namespace {

Status check_options(const RuntimeOptions& options, const Collectives& world) {
  const int me = world.world_rank();
  if (options.layout.world_size() != world.size()) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("layout: tp {} x dp {} = {} ranks, but the job has {} ranks; set tp and dp so that "
                              "tp * dp equals the world size",
                              options.layout.tp, options.layout.dp, options.layout.world_size(), world.size()),
                  {me, -1, "start"});
  }
  if (!is_shm_name_part(options.shm_name_part))
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("shm_name_part '{}' is not {} lowercase hex characters; take LaunchEnv::shm_name_part",
                              excerpt(options.shm_name_part), kShmNamePartChars),
                  {me, -1, "start"});
  return Status(validate(options.table_model)).with_context(me, -1, "start");
}

}  // namespace

struct EngramRuntime::State {
  std::unique_ptr<Collectives> placement_group;  // the placement's: shard group or node-local group
  std::unique_ptr<Collectives> tp_group;         // this rank's replica, by TP rank
  std::unique_ptr<Collectives> host_group;       // every rank of this host
  int host_writer_world_rank = -1;               // the host's lowest world rank: host_group rank 0
  std::unique_ptr<PlacementTables> tables;
  std::optional<HostLookupStaging> staging;       // lookup_through_device's buffers
};

EngramRuntime::EngramRuntime(RankBackend& backend, RuntimeOptions options)
    : backend_(backend), options_(std::move(options)), state_(std::make_unique<State>()) {}

EngramRuntime::~EngramRuntime() {
  if (stopped_ || !state_) return;
  // Local clean-up only (a peer may be gone): users first, then the
  // placement's tables give back what this rank holds.
  if (backend_.device != nullptr) backend_.device->synchronize().ignore();
  if (state_->staging) state_->staging->release(*backend_.compute).ignore();
  state_->tables.reset();
}

Result<std::unique_ptr<EngramRuntime>> EngramRuntime::start(RankBackend& backend, const RuntimeOptions& options,
                                                           WarningSink& sink) {
  ENGRAM_CHECK(backend.world != nullptr && backend.probe != nullptr && backend.shm != nullptr);
  const int me = backend.world->world_rank();
  ENGRAM_RETURN_IF_ERROR(check_options(options, *backend.world));

  // 1. Facts from every rank; the decision `plan` makes from them.
  ENGRAM_ASSIGN_OR_RETURN(const std::shared_ptr<const SharedPlan> shared, gather_and_decide(backend, options));
  const PlanResult& plan = shared->plan.value();
  for (const Warning& w : plan.warnings) sink.emit(w);
  const RankPlan& rank_plan = plan.ranks[static_cast<size_t>(me)];

  std::unique_ptr<EngramRuntime> runtime(new EngramRuntime(backend, options));
  RuntimeFacts& facts = runtime->facts_;
  facts.placement = rank_plan.placement;
  facts.node_local_group_size = rank_plan.node_local_group_size;
  facts.host_index = rank_plan.host;
  facts.host_count = static_cast<int>(plan.deployment.hosts.size());
  for (const HostSpec& host : plan.deployment.hosts) facts.ranks_share_gpus |= host.ranks_per_gpu > 1;
  if (const int g = shared->group_of_rank[static_cast<size_t>(me)]; g >= 0)
    facts.reason = plan.groups[static_cast<size_t>(g)].reason;
  // 2. The placement's group and the host's. 3. The placement's tables.
  ENGRAM_RETURN_IF_ERROR(runtime->join_groups(plan, shared->host_writer_world_rank[static_cast<size_t>(rank_plan.host)]));
  ENGRAM_RETURN_IF_ERROR(runtime->build_tables());
  return runtime;
}

// Every rank makes both splits, in the same order, whatever its placement,
// so the world's collective sequence stays aligned.
Status EngramRuntime::join_groups(const PlanResult& plan, int host_writer_world_rank) {
  Collectives& world = *backend_.world;
  const int me = world.world_rank();
  const RankPlan& rank_plan = plan.ranks[static_cast<size_t>(me)];
  State& state = *state_;
  const bool shard_group = placement_ops(rank_plan.placement).group == PlacementGroup::kShardGroup;
  const int color = shard_group ? rank_plan.shard_group : rank_plan.node_local_group;
  const int key = shard_group ? rank_plan.shard_index : rank_plan.node_local_index;
  ENGRAM_ASSIGN_OR_RETURN(state.placement_group, world.split(color, key));
  ENGRAM_ASSIGN_OR_RETURN(state.tp_group, world.split(rank_plan.dp_rank, rank_plan.tp_rank));
  ENGRAM_CHECK(state.tp_group->size() == options_.layout.tp && state.tp_group->rank() == rank_plan.tp_rank);
  ENGRAM_ASSIGN_OR_RETURN(state.host_group, world.split(rank_plan.host, me));
  // Every rank knows its host's writer from the plan (host_group orders by
  // world rank), so survivors can tell when it is the writer that is gone.
  state.host_writer_world_rank = host_writer_world_rank;
  ENGRAM_CHECK(state.host_writer_world_rank >= 0);
  ENGRAM_CHECK((state.host_group->rank() == 0) == (state.host_writer_world_rank == me));
  return Status::ok();
}

Status EngramRuntime::build_tables() {
  const int me = backend_.world->world_rank();
  const PlacementOps& ops = placement_ops(facts_.placement);
  if (ops.capable != nullptr) ENGRAM_RETURN_IF_ERROR(ops.capable(backend_).with_context(me, -1, "start"));
  // Every path this rank looks up by (CPU rows, the host stager, the device
  // kernels, the collective) decodes scale bytes 0 and 255 and writes -0 as
  // the planning engine does on this placement's path: SGLang loses -0 where
  // the lookup sums its members' rows, vLLM never.
  facts_.rows_summed = ops.sums_members_rows && state_->placement_group->size() > 1;
  apply_engine_value_rules(engine_profile_of(options_.engine), facts_.rows_summed, options_.table_model);
  PlacementContext context{
      .backend = backend_,
      .group = *state_->placement_group,
      .tp_group = *state_->tp_group,
      .host_group = *state_->host_group,
      .host_writer_world_rank = state_->host_writer_world_rank,
      .model = options_.table_model,
      .fill_seed = options_.fill_seed,
      .job_id = options_.job_id,
      .shm_name_part = options_.shm_name_part,
      .host_fill_chunk_bytes = options_.host_fill_chunk_bytes,
      .tokens_per_rank_max = std::max(1, options_.config.tokens_per_rank_max),
      .collective_cross_check = options_.collective_cross_check,
      .ranks_share_gpus = facts_.ranks_share_gpus,
  };
  ENGRAM_ASSIGN_OR_RETURN(state_->tables, ops.build(context));
  const PlacementFootprint& built = state_->tables->footprint();
  facts_.handle_type = built.handle_type;
  facts_.device_bytes = built.device_bytes;
  facts_.host_bytes = built.host_bytes;
  facts_.shared_host_bytes = built.shared_host_bytes;
  facts_.host_fill_seconds = built.host_fill_seconds;
  facts_.device_register_seconds = built.device_register_seconds;
  return Status::ok();
}

Status EngramRuntime::lookup(int table_index, std::span<const int64_t> row_ids, int64_t tokens_per_rank_max,
                             std::span<uint16_t> output) {
  const int me = backend_.world->world_rank();
  if (stopped_) return Status(ErrorCode::kFailedPrecondition, "lookup after stop()", {me, -1, "lookup"});
  const std::vector<TableSpec>& tables = options_.table_model.tables;
  const bool known = table_index >= 0 && table_index < static_cast<int>(tables.size());
  const int tp = options_.layout.tp;
  const bool sequence_parallel = options_.config.sequence_parallel && tp > 1;
  const PlacementOps& ops = placement_ops(facts_.placement);
  if (known) {
    LookupRequest request{&tables[static_cast<size_t>(table_index)], row_ids, tokens_per_rank_max, output};
    if (!sequence_parallel) return state_->tables->lookup(table_index, request);
    if (!ops.needs_device || ops.trades_token_shards) {
      // The host placements' TP step, and device_head_sharded's exchange, trade token shards.
      request.sequence_parallel_shards = tp;
      return state_->tables->lookup(table_index, request);
    }
    // Other device placements hold row shards, so every rank looks up every
    // token of its own; its token shard is then cut from that.
    return lookup_token_shard(table_index, row_ids, tokens_per_rank_max, output);
  }
  const Status unknown = Status(ErrorCode::kInvalidArgument,
                                fmt::format("table index {} is out of range: the model has {} Engram tables (0..{})",
                                            table_index, tables.size(), static_cast<int>(tables.size()) - 1),
                                {me, -1, "lookup"});
  // A placement whose lookup is collective still takes its part in the step
  // with an unknown table (sized by table 0), so the group fails it on every
  // rank rather than waiting on this one; the others have no collective to
  // join. The ids and output are the caller's for a table we do not know:
  // contribute nothing, so no shape check fails the step early.
  // Above TP1 every host placement's lookup is collective over the TP group.
  const bool collective = ops.collective_lookup || (!ops.needs_device && tp > 1);
  if (!collective || tables.empty()) return unknown;
  LookupRequest request{&tables[0], {}, tokens_per_rank_max, {}};
  request.table_unknown = true;
  if (sequence_parallel && (!ops.needs_device || ops.trades_token_shards)) request.sequence_parallel_shards = tp;
  const Status joined = state_->tables->lookup(0, request);
  // The group's verdict is about the others; this rank's error is its index.
  if (joined.code() != ErrorCode::kOk && joined.code() != ErrorCode::kFailedPrecondition) return joined;
  return unknown;
}

Status EngramRuntime::lookup_token_shard(int table_index, std::span<const int64_t> row_ids,
                                        int64_t tokens_per_rank_max, std::span<uint16_t> output) {
  const int me = backend_.world->world_rank();
  const TableSpec& table = options_.table_model.tables[static_cast<size_t>(table_index)];
  const int tp = options_.layout.tp;
  const size_t heads = static_cast<size_t>(table.head_count());
  const size_t token_values = heads * static_cast<size_t>(table.dim);
  const size_t tokens = row_ids.size() / heads;
  const size_t shard = (tokens + static_cast<size_t>(tp) - 1) / static_cast<size_t>(tp);
  // The whole-token lookup, with the shape of its output checked against the shard.
  std::vector<uint16_t> all(row_ids.size() % heads == 0 ? tokens * token_values : 0);
  Status looked_up = state_->tables->lookup(table_index, LookupRequest{&table, row_ids, tokens_per_rank_max, all});
  ENGRAM_RETURN_IF_ERROR(looked_up);
  if (output.size() != shard * token_values)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("lookup: output holds {} bf16 values; this TP rank's shard of {} tokens over {} is {} "
                              "tokens x {} heads x {} dim = {}",
                              output.size(), tokens, tp, shard, heads, table.dim, shard * token_values),
                  {me, -1, "lookup"});
  const size_t first = static_cast<size_t>(state_->tp_group->rank()) * shard;
  std::fill(output.begin(), output.end(), uint16_t{0});
  for (size_t k = 0; k < shard && first + k < tokens; ++k)
    std::copy_n(all.begin() + static_cast<std::ptrdiff_t>((first + k) * token_values), token_values,
                output.begin() + static_cast<std::ptrdiff_t>(k * token_values));
  return Status::ok();
}

Status EngramRuntime::lookup_device(int table_index, DeviceLookupRequest request) {
  const int me = backend_.world->world_rank();
  if (stopped_) return Status(ErrorCode::kFailedPrecondition, "lookup after stop()", {me, -1, "lookup"});
  // Every rank has the same config, so all of a group refuse alike.
  const PlacementOps& ops = placement_ops(facts_.placement);
  const bool sequence_parallel = options_.config.sequence_parallel && options_.layout.tp > 1;
  if (sequence_parallel && !ops.trades_token_shards)
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("{}'s device lookup writes every token's heads, but sequence_parallel is on (each TP "
                              "rank keeps its token shard): use the host lookup, or set sequence_parallel: false",
                              ops.name),
                  {me, -1, "lookup"});
  if (sequence_parallel) request.sequence_parallel_shards = options_.layout.tp;
  const std::vector<TableSpec>& tables = options_.table_model.tables;
  if (table_index >= 0 && table_index < static_cast<int>(tables.size())) {
    request.table = &tables[static_cast<size_t>(table_index)];
    return state_->tables->lookup_device(table_index, request);
  }
  const Status unknown = Status(ErrorCode::kInvalidArgument,
                                fmt::format("table index {} is out of range: the model has {} Engram tables (0..{})",
                                            table_index, tables.size(), static_cast<int>(tables.size()) - 1),
                                {me, -1, "lookup"});
  // As in lookup(): a collective placement still takes its part, all DEAD.
  if (!ops.collective_lookup || tables.empty()) return unknown;
  request.table = &tables[0];
  request.table_unknown = true;
  request.contribute = false;
  const Status joined = state_->tables->lookup_device(0, request);
  if (!joined.is_ok()) return joined;
  return unknown;
}

Status EngramRuntime::lookup_device_collective(int table_index, DeviceLookupRequest request) {
  const int me = backend_.world->world_rank();
  if (stopped_) return Status(ErrorCode::kFailedPrecondition, "lookup after stop()", {me, -1, "lookup"});
  const std::vector<TableSpec>& tables = options_.table_model.tables;
  if (table_index < 0 || table_index >= static_cast<int>(tables.size())) {
    return Status(ErrorCode::kInvalidArgument, fmt::format("table index {} is out of range", table_index),
                  {me, -1, "lookup"});
  }
  request.table = &tables[static_cast<size_t>(table_index)];
  return state_->tables->lookup_device_collective(table_index, request);
}

bool EngramRuntime::collective_cross_check_built() const {
  return !stopped_ && state_->tables && state_->tables->collective_cross_check_built();
}

bool EngramRuntime::device_lookup_ready() const {
  return !stopped_ && backend_.compute != nullptr &&
         (!options_.config.sequence_parallel || placement_ops(facts_.placement).trades_token_shards) &&
         state_->tables->device_lookup_ready();
}

Status EngramRuntime::lookup_through_device(int table_index, std::span<const int64_t> row_ids,
                                            int64_t tokens_per_rank_max, std::span<uint16_t> output) {
  const int me = backend_.world->world_rank();
  if (stopped_) return Status(ErrorCode::kFailedPrecondition, "lookup after stop()", {me, -1, "lookup"});
  if (backend_.compute == nullptr)
    return Status(ErrorCode::kFailedPrecondition,
                  "the device lookup needs this rank's GPU (no device compute was opened for it)", {me, -1, "lookup"});
  const std::vector<TableSpec>& tables = options_.table_model.tables;
  DeviceLookupRequest joined_only;
  joined_only.tokens_per_rank_max = tokens_per_rank_max;
  joined_only.contribute = false;
  // An unknown table: lookup_device joins the group's step and names it.
  if (table_index < 0 || table_index >= static_cast<int>(tables.size())) return lookup_device(table_index, joined_only);
  if (!state_->staging) {
    auto staging = HostLookupStaging::make(*backend_.compute, options_.table_model, tokens_per_rank_max);
    if (!staging.is_ok()) {
      // Still take part, so a collective placement's peers finish the step.
      lookup_device(table_index, joined_only).ignore();
      return std::move(staging).take_status().with_context(me, -1, "lookup staging");
    }
    state_->staging = std::move(staging).value();
  }
  LookupRequest request{&tables[static_cast<size_t>(table_index)], row_ids, tokens_per_rank_max, output};
  // A placement that trades token shards writes this TP rank's shard, as lookup() does.
  if (options_.config.sequence_parallel && options_.layout.tp > 1 && placement_ops(facts_.placement).trades_token_shards)
    request.sequence_parallel_shards = options_.layout.tp;
  return state_->staging->run(*backend_.compute, request, me, [&](const DeviceLookupRequest& d) {
    return lookup_device(table_index, d);
  });
}

Status EngramRuntime::stop() {
  if (stopped_) return Status::ok();
  stopped_ = true;
  Status first;
  const int me = backend_.world->world_rank();
  // Keeps the first failure, naming this rank and the step where the
  // backend's own error did not.
  auto keep_first = [&first, me](Status s) {
    if (first.is_ok() && !s.is_ok()) first = std::move(s).with_context(me, -1, "stop");
  };
  if (backend_.device != nullptr) keep_first(backend_.device->synchronize());  // users first, then unmap
  if (state_->staging) {
    keep_first(state_->staging->release(*backend_.compute));
    state_->staging.reset();
  }
  keep_first(state_->tables->release());
  // Every rank of the host has let go before host-wide files go. A failed
  // barrier (a member is gone, perhaps the one that would remove them) is
  // the placement's cue to remove them from any survivor.
  Status barrier = state_->host_group->barrier();
  const bool barrier_ok = barrier.is_ok();
  keep_first(std::move(barrier));
  keep_first(state_->tables->after_host_released(barrier_ok));
  return first;
}

}  // namespace engram
