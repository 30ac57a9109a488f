// Test support for the lookup tests: build a table's bytes, run one placement
// over emulated ranks, and the direct lookup every placement must equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/base/bf16.h"
#include "core/placements/device_collective.h"
#include "core/placements/device_peer.h"
#include "core/placements/host_head_sharded.h"
#include "core/placements/host_private.h"
#include "core/placements/host_shared.h"
#include "core/lookup/lookup_rows.h"
#include "core/lookup/shard_layout.h"
#include "core/model/table_fill.h"
#include "kernels/gather_reference.h"
#include "sim/sim_collectives.h"

namespace engram::testing {

enum class LookupPlacement { kDeviceCollective, kDevicePeer, kHostShared, kHostHeadSharded, kHostPrivate };
inline constexpr LookupPlacement kAllPlacements[] = {
    LookupPlacement::kDeviceCollective, LookupPlacement::kDevicePeer, LookupPlacement::kHostShared,
    LookupPlacement::kHostHeadSharded, LookupPlacement::kHostPrivate};

inline const char* name_of(LookupPlacement p) {
  switch (p) {
    case LookupPlacement::kDeviceCollective: return "device_collective";
    case LookupPlacement::kDevicePeer: return "device_peer";
    case LookupPlacement::kHostShared: return "host_shared";
    case LookupPlacement::kHostHeadSharded: return "host_head_sharded";
    case LookupPlacement::kHostPrivate: return "host_private";
  }
  return "?";
}

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

// Runs `placement` on ids_by_rank.size() emulated ranks. Every rank gets its
// own copies of what it holds (its shard, the node's table, its private copy)
// cut from `table_bytes`, so a placement that reads the wrong bytes shows.
inline PlacementRun run_placement(LookupPlacement placement, const TableSpec& table,
                                  std::span<const std::byte> table_bytes,
                                  const std::vector<std::vector<int64_t>>& ids_by_rank, int64_t slot_tokens,
                                  uint64_t seed) {
  const int group = static_cast<int>(ids_by_rank.size());
  const uint64_t row_bytes = table.row_bytes();
  const RowShardLayout layout(table.row_count(), group);
  std::vector<std::vector<std::byte>> row_shards(static_cast<size_t>(group));
  for (int r = 0; r < group; ++r) {
    auto begin = table_bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<uint64_t>(layout.shard_begin(r)) * row_bytes);
    row_shards[static_cast<size_t>(r)].assign(begin, begin + static_cast<std::ptrdiff_t>(
                                                                 static_cast<uint64_t>(layout.shard_rows(r)) * row_bytes));
  }
  std::vector<std::span<const std::byte>> shard_views(row_shards.begin(), row_shards.end());
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
    switch (placement) {
      case LookupPlacement::kDeviceCollective:
        return lookup_device_collective(world, request, layout, row_shards[static_cast<size_t>(rank)]);
      case LookupPlacement::kDevicePeer:
        return lookup_device_peer(world, request, layout, shard_views);
      case LookupPlacement::kHostShared:
        return lookup_host_shared(*solo, request, node_copy);
      case LookupPlacement::kHostHeadSharded: {
        const HeadShardRows rows = head_shard_rows(table, group, rank);
        std::vector<std::byte> mine(table_bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<uint64_t>(rows.first_row) * row_bytes),
                                    table_bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<uint64_t>(rows.first_row + rows.row_count) * row_bytes));
        return lookup_host_head_sharded(world, *solo, request, mine);
      }
      case LookupPlacement::kHostPrivate: {
        std::vector<std::byte> private_copy(table_bytes.begin(), table_bytes.end());
        return lookup_host_private(*solo, request, private_copy);
      }
    }
    return internal_error("unknown placement");
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
