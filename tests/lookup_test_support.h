// Test support for the lookup tests: build a table's bytes, run one placement
// over emulated ranks, and the direct lookup every placement must equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/base/bf16.h"
#include "core/placements/device_collective.h"
#include "core/placements/device_peer.h"
#include "core/placements/host_head_sharded.h"
#include "core/placements/host_private.h"
#include "core/placements/host_shared.h"
#include "core/placements/shared_host_copy.h"
#include "core/placements/sglang_private.h"
#include "core/lookup/lookup_rows.h"
#include "core/lookup/shard_layout.h"
#include "core/model/table_fill.h"
#include "kernels/gather_reference.h"
#include "core/exchange/peer_shard_table.h"
#include "core/lookup/device_lookup.h"
#include "core/placements/host_lookup_staging.h"
#include "core/placements/placement.h"
#include "sim/sim_collectives.h"
#include "sim/world.h"

namespace engram::testing {

inline std::vector<std::byte> filled_table(const TableSpec& table, uint64_t seed) {
  std::vector<std::byte> bytes(table.table_bytes());
  fill_table_rows(table, seed, 0, bytes);
  return bytes;
}

// The rule every placement must equal: whole table, this token's rows. It
// goes through the kernels' value-by-value reference (one shard holding the
// whole table), not core's row loops, which host_shared and host_private
// run themselves: a reference they share could not catch their mistakes.
inline std::vector<uint16_t> direct_lookup(const TableSpec& table, std::span<const std::byte> table_bytes,
                                           std::span<const int64_t> row_ids) {
  std::vector<uint16_t> out(row_ids.size() * static_cast<size_t>(table.dim));
  const RowShardLayout whole(table.row_count(), 1);
  const std::span<const std::byte> only_shard = table_bytes;
  kernels::gather_peer_reference(table, whole, std::span<const std::span<const std::byte>>(&only_shard, 1), row_ids,
                                 out);
  return out;
}

struct PlacementRun {
  std::vector<Status> statuses;               // by rank
  std::vector<std::vector<uint16_t>> output;  // by rank; left as filled (0xdead-ish sentinel) on error
};

inline constexpr uint16_t kUnwritten = 0x5a5a;

// The device placements' lookups on emulated GPUs (one host, a GPU per
// rank), through the device path the runtime runs: device_peer's shards
// exchanged and gathered by owner; device_collective's collective over row
// ranges. Ids are uploaded and outputs downloaded around it.
inline PlacementRun run_device_placement(Placement placement, const TableSpec& table,
                                         std::span<const std::byte> table_bytes,
                                         const std::vector<std::vector<int64_t>>& ids_by_rank, int64_t slot_tokens,
                                         uint64_t seed) {
  const int group = static_cast<int>(ids_by_rank.size());
  const uint64_t row_bytes = table.row_bytes();
  const RowShardLayout layout(table.row_count(), group);
  ModelSpec model;
  model.tables = {table};
  PlacementRun run;
  run.output.resize(static_cast<size_t>(group));
  run.statuses.assign(static_cast<size_t>(group), Status::ok());
  for (int r = 0; r < group; ++r)
    run.output[static_cast<size_t>(r)].assign(ids_by_rank[static_cast<size_t>(r)].size() * static_cast<size_t>(table.dim),
                                              kUnwritten);
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("gpu-host-", 1, group, "H200");
  spec.seed = seed;
  auto world = sim::run_world(spec, [&](RankBackend& b) -> Status {
    const int me = b.world_rank;
    DeviceCompute& c = *b.compute;
    const std::vector<int64_t>& ids = ids_by_rank[static_cast<size_t>(me)];
    std::vector<uint16_t>& out = run.output[static_cast<size_t>(me)];
    // The host wrapper the runtime uses (shape checks, upload, download): a
    // malformed request still joins the collective with contribute false.
    ENGRAM_ASSIGN_OR_RETURN(HostLookupStaging staging, HostLookupStaging::make(c, model, slot_tokens));
    std::vector<DevicePtr> to_free;
    std::function<Status(const DeviceLookupRequest&)> device_lookup;
    std::optional<PeerShardTable> shards;
    std::unique_ptr<DeviceCollectives> comm;
    CollectiveWorkspace w;
    if (placement == Placement::kDevicePeer) {
      auto built = PeerShardTable::build(b, *b.world, table.row_count(), row_bytes,
                                         host_staged_filler(*b.device, row_bytes, [&](int64_t first, std::span<std::byte> rows) {
                                           std::copy_n(table_bytes.begin() + static_cast<std::ptrdiff_t>(first * row_bytes),
                                                       rows.size(), rows.begin());
                                           return Status::ok();
                                         }));
      if (!built.is_ok()) return built.status();
      shards.emplace(std::move(built).value());
      const std::vector<int64_t> shard_starts = shards->shard_starts();
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr starts, c.allocate(shard_starts.size() * 8));
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr bases, c.allocate(shards->shard_pointers().size() * 8));
      to_free.push_back(starts);
      to_free.push_back(bases);
      ENGRAM_RETURN_IF_ERROR(c.copy_to_device(starts, std::as_bytes(std::span(shard_starts))));
      ENGRAM_RETURN_IF_ERROR(c.copy_to_device(bases, std::as_bytes(shards->shard_pointers())));
      device_lookup = [&, starts, bases](const DeviceLookupRequest& r) -> Status {
        ENGRAM_RETURN_IF_ERROR(check_device_request(r, me));
        if (!r.contribute) return Status::ok();
        ENGRAM_RETURN_IF_ERROR(check_device_slot(r, me));
        if (r.tokens == 0) return Status::ok();
        DeviceGather g;
        g.ids = r.row_ids;
        g.tokens = r.tokens;
        g.ids_per_token = table.head_count();
        g.head_count = table.head_count();
        g.shard_starts = starts;
        g.shard_bases = bases;
        g.shard_count = group;
        g.layout = device_row_layout(table);
        g.out = r.output;
        return c.gather(g, r.stream);
      };
    } else {
      ENGRAM_ASSIGN_OR_RETURN(comm, c.connect(*b.world));
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr shard, c.allocate(std::max<int64_t>(1, layout.shard_rows(me)) * row_bytes));
      to_free.push_back(shard);
      const auto own = table_bytes.subspan(static_cast<size_t>(layout.shard_begin(me)) * row_bytes,
                                           static_cast<size_t>(layout.shard_rows(me)) * row_bytes);
      if (!own.empty()) ENGRAM_RETURN_IF_ERROR(c.copy_to_device(shard, own));
      ENGRAM_ASSIGN_OR_RETURN(w, make_collective_workspace(c, slot_tokens, model, group, me));
      device_lookup = [&, shard](const DeviceLookupRequest& r) {
        return lookup_collective_on_device(c, *comm, w,
                                           OwnedRows{layout.shard_begin(me), layout.shard_rows(me), shard, nullptr}, 0,
                                           r, me, GroupHeaders::kNone);
      };
    }
    const Status looked = staging.run(c, LookupRequest{&table, ids, slot_tokens, out}, me, device_lookup);
    if (shards) ENGRAM_RETURN_IF_ERROR(shards->teardown());
    if (comm) ENGRAM_RETURN_IF_ERROR(free_collective_workspace(c, w));
    ENGRAM_RETURN_IF_ERROR(staging.release(c));
    for (DevicePtr p : to_free) ENGRAM_RETURN_IF_ERROR(c.free(p));
    return looked;
  });
  if (!world.is_ok()) {
    run.statuses.assign(static_cast<size_t>(group), world.status());
    return run;
  }
  run.statuses = world->statuses;
  return run;
}

// A placement that fills its own tables (device_head_sharded: slices of
// table_fill's bytes on each device), built and looked up through its
// registration on emulated GPUs of one host, every rank its own replica
// (TP1) and the whole world its shard group. Its fill seed is `seed`, so
// `table_bytes` must be filled_table(table, seed).
inline PlacementRun run_built_placement(Placement placement, const TableSpec& table,
                                        std::span<const std::byte> table_bytes,
                                        const std::vector<std::vector<int64_t>>& ids_by_rank, int64_t slot_tokens,
                                        uint64_t seed) {
  const int group = static_cast<int>(ids_by_rank.size());
  PlacementRun run;
  run.output.resize(static_cast<size_t>(group));
  for (int r = 0; r < group; ++r)
    run.output[static_cast<size_t>(r)].assign(ids_by_rank[static_cast<size_t>(r)].size() * static_cast<size_t>(table.dim),
                                              kUnwritten);
  if (!std::ranges::equal(table_bytes, filled_table(table, seed))) {
    run.statuses.assign(static_cast<size_t>(group),
                        internal_error(fmt::format("{} fills its own tables: give it filled_table(table, {})",
                                                   placement_name(placement), seed)));
    return run;
  }
  ModelSpec model;
  model.tables = {table};
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("gpu-host-", 1, group, "H200");
  spec.seed = seed;
  auto world = sim::run_world(spec, [&](RankBackend& b) -> Status {
    const int me = b.world_rank;
    ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<Collectives> solo, b.world->split(me, 0));
    PlacementContext context{.backend = b, .group = *b.world, .tp_group = *solo, .host_group = *b.world,
                             .host_writer_world_rank = 0, .model = model, .fill_seed = seed, .job_id = "test"};
    context.tokens_per_rank_max = slot_tokens;
    ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<PlacementTables> tables, placement_ops(placement).build(context));
    const Status looked = tables->lookup(
        0, LookupRequest{&table, ids_by_rank[static_cast<size_t>(me)], slot_tokens, run.output[static_cast<size_t>(me)]});
    ENGRAM_RETURN_IF_ERROR(tables->release());
    return looked;
  });
  if (!world.is_ok()) {
    run.statuses.assign(static_cast<size_t>(group), world.status());
    return run;
  }
  run.statuses = world->statuses;
  return run;
}

// Runs `placement` on ids_by_rank.size() emulated ranks. Every rank gets its
// own copies of what it holds (its shard, the node's table, its private copy)
// cut from `table_bytes`, so a placement that reads the wrong bytes shows.
inline PlacementRun run_placement(Placement placement, const TableSpec& table,
                                  std::span<const std::byte> table_bytes,
                                  const std::vector<std::vector<int64_t>>& ids_by_rank, int64_t slot_tokens,
                                  uint64_t seed) {
  if (placement == Placement::kDevicePeer || placement == Placement::kDeviceCollective)
    return run_device_placement(placement, table, table_bytes, ids_by_rank, slot_tokens, seed);
  if (placement == Placement::kDeviceHeadSharded)
    return run_built_placement(placement, table, table_bytes, ids_by_rank, slot_tokens, seed);
  const int group = static_cast<int>(ids_by_rank.size());
  const std::vector<std::byte> node_copy(table_bytes.begin(), table_bytes.end());

  PlacementRun run;
  run.output.resize(static_cast<size_t>(group));
  for (int r = 0; r < group; ++r)
    run.output[static_cast<size_t>(r)].assign(ids_by_rank[static_cast<size_t>(r)].size() * static_cast<size_t>(table.dim),
                                              kUnwritten);
  auto ranks = sim::run_ranks(group, seed, [&](int rank, Collectives& world) -> Status {
    // Every rank its own replica at TP1: a TP group of one.
    ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<Collectives> solo, world.split(rank, 0));
    LookupRequest request;
    request.table = &table;
    request.row_ids = ids_by_rank[static_cast<size_t>(rank)];
    request.tokens_per_rank_max = slot_tokens;
    request.output = run.output[static_cast<size_t>(rank)];
    // Each host placement cuts its own part out of the whole table (its
    // ops' lookup_from_whole_table); the device ones ran above.
    const PlacementOps& ops = placement_ops(placement);
    if (ops.lookup_from_whole_table == nullptr)
      return internal_error(std::string(ops.name) + " has no host lookup over a whole table: device placements run on emulated GPUs");
    return ops.lookup_from_whole_table(world, *solo, request, node_copy);
  });
  run.statuses = std::move(ranks.statuses);
  return run;
}

// Index of the first value where a and b differ (bf16_same), or -1.
inline int64_t first_difference(std::span<const uint16_t> a, std::span<const uint16_t> b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!bf16_same(a[i], b[i])) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace engram::testing
