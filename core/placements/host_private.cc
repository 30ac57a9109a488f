#include "core/placements/host_private.h"

#include "core/lookup/lookup_whole_table.h"
#include "core/placements/private_host_rows.h"

namespace engram {
namespace {

RowRange whole_table(const TableSpec& table, const Collectives&) { return {0, table.row_count()}; }

PlacementCost cost(const ModelSpec& model, const PlacementCostInput&) {
  return {.host_private_bytes = model.table_bytes_total(), .table_copy = TableCopyScope::kRank};
}

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  return build_private_host_rows(context.group, context.model, context.fill_seed, whole_table, lookup_host_private);
}

}  // namespace

const PlacementOps& host_private_ops() {
  static const PlacementOps ops{
      .id = Placement::kHostPrivate, .name = "host_private", .group = PlacementGroup::kNodeLocalGroup, .cost = cost,
      .host_memory_fix = "host_private keeps one table per rank: with dp > 1 and the replicas co-located, leave "
                         "dp_shared_memory unset (or true) for host_shared, one copy per node",
      .build = build};
  return ops;
}

Status lookup_host_private(Collectives& group, const LookupRequest& request,
                           std::span<const std::byte> private_table_bytes) {
  return lookup_whole_table(group, request, private_table_bytes, "host_private: the private copy");
}

}  // namespace engram
