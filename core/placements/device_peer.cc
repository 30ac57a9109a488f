#include "core/placements/device_peer.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

#include "core/exchange/peer_shard_table.h"
#include "core/lookup/lookup_rows.h"
#include "core/model/table_fill.h"
#include "core/placements/device_row_shards.h"

namespace engram {
namespace {

// One peer-shard table per Engram table (core/exchange/peer_shard_table.h):
// this rank's shard, and its mappings of every peer's.
class DevicePeerTables final : public PlacementTables {
 public:
  explicit DevicePeerTables(Collectives& group) : group_(group) {}

  Status lookup(int table_index, const LookupRequest& request) override {
    const PeerShardTable& table = tables_[static_cast<size_t>(table_index)];
    return lookup_device_peer_by_row(group_, request, [&table](int64_t row, std::span<std::byte> bytes) {
      return table.read_row(row, bytes);
    });
  }

  // Collective per table (SharedMapping::teardown); tables already built
  // when a later one fails are released locally by the destructor.
  Status release() override {
    Status first;
    for (PeerShardTable& table : tables_) {
      Status torn = table.teardown();
      if (first.is_ok()) first = std::move(torn);
    }
    tables_.clear();
    return first;
  }

  Status build(RankBackend& backend, const ModelSpec& model, uint64_t fill_seed) {
    for (const TableSpec& spec : model.tables) {
      auto table = PeerShardTable::build(backend, group_, spec.row_count(), spec.row_bytes(),
                                         [&spec, fill_seed](int64_t first_row, std::span<std::byte> rows) {
                                           fill_table_rows(spec, fill_seed, first_row, rows);
                                           return Status::ok();
                                         });
      // This one left nothing behind; those built before go with this object.
      if (!table.is_ok()) return std::move(table).take_status();
      tables_.push_back(std::move(table).value());
      footprint_.handle_type = tables_.back().handle_type();
      footprint_.device_bytes += tables_.back().shard_allocation_bytes();
    }
    return Status::ok();
  }

 private:
  Collectives& group_;
  std::vector<PeerShardTable> tables_;
};

PlacementCost cost(const ModelSpec& model, const PlacementCostInput& in) {
  return {.hbm_table_bytes = device_shard_hbm_bytes(model, in.shard_group_size, in.vmm_granularity_bytes)};
}

Status capable(const RankBackend& backend) { return needs_a_device(backend, Placement::kDevicePeer); }

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  auto tables = std::make_unique<DevicePeerTables>(context.group);
  ENGRAM_RETURN_IF_ERROR(tables->build(context.backend, context.model, context.fill_seed));
  return std::unique_ptr<PlacementTables>(std::move(tables));
}

}  // namespace

const PlacementOps& device_peer_ops() {
  static const PlacementOps ops{.id = Placement::kDevicePeer, .name = "device_peer", .needs_device = true,
                                .group = PlacementGroup::kShardGroup, .shares_device_memory = true, .cost = cost,
                                .capable = capable, .build = build};
  return ops;
}

Status lookup_device_peer(Collectives& group, const LookupRequest& request, const RowShardLayout& layout,
                          std::span<const std::span<const std::byte>> shards_by_owner) {
  const int world_rank = group.world_rank();
  ENGRAM_RETURN_IF_ERROR(check_request(request, world_rank));
  const TableSpec& table = *request.table;
  if (layout.row_count() != table.row_count() || static_cast<int>(shards_by_owner.size()) != layout.shard_count())
    return invalid_argument(fmt::format("device_peer: {} shard mappings for a layout of {} rows in {} shards; "
                                        "layer {} has {} rows",
                                        shards_by_owner.size(), layout.row_count(), layout.shard_count(),
                                        table.layer_id, table.row_count()))
        .with_context(world_rank, -1, "lookup");
  for (int s = 0; s < layout.shard_count(); ++s) {
    const uint64_t expected = static_cast<uint64_t>(layout.shard_rows(s)) * table.row_bytes();
    if (shards_by_owner[static_cast<size_t>(s)].size() != expected)
      return invalid_argument(fmt::format("device_peer: the mapping of shard {} holds {} bytes; {} rows of {} B "
                                          "need {}",
                                          s, shards_by_owner[static_cast<size_t>(s)].size(), layout.shard_rows(s),
                                          table.row_bytes(), expected))
          .with_context(world_rank, s, "lookup");
  }
  lookup_rows_from_shards(table, layout, shards_by_owner, request.row_ids, request.output);
  return Status::ok();
}

Status lookup_device_peer_by_row(Collectives& group, const LookupRequest& request, const PeerRowRead& read_row) {
  const int world_rank = group.world_rank();
  ENGRAM_RETURN_IF_ERROR(check_request(request, world_rank));
  Status failed;
  const bool ok = lookup_rows_by_reader(
      *request.table,
      [&](int64_t row, std::span<std::byte> bytes) {
        failed = read_row(row, bytes);
        return failed.is_ok();
      },
      request.row_ids, request.output);
  if (!ok) return std::move(failed).with_context(world_rank, -1, "lookup");
  return Status::ok();
}

}  // namespace engram
