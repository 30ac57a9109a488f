#include "core/placements/host_private.h"
#include "core/placements/host_slice_step.h"

#include <fmt/format.h>

#include "core/base/units.h"
#include "core/deployment/deployment.h"
#include "core/lookup/lookup_tp_slice.h"
#include "core/lookup/tp_heads.h"
#include "core/placements/host_rows_on_device.h"
#include "core/placements/private_host_rows.h"

namespace engram {
namespace {

RowRange tp_slice(const TableSpec& table, const Collectives&, const Collectives& tp_group) {
  return rows_of_heads(table, tp_head_slice(table.head_count(), tp_group.size(), tp_group.rank()));
}

Status lookup_slice(Collectives&, Collectives& tp_group, const LookupRequest& request,
                    std::span<const std::byte> slice_bytes) {
  return lookup_host_private(tp_group, request, slice_bytes);
}

}  // namespace

namespace host_private_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput& in) {
  // Above tp 1 the device lookup serves the TP group's slices (its collective).
  return {.host_private_bytes = tp_slice_host_bytes(model, in.tp_size, in.tp_rank),
          .table_copy = TableCopyScope::kReplica,
          .host_pinned_bytes = host_lookup_pinned_bytes(model, in.tokens_per_rank_max, in.tp_size > 1, in.tp_size)};
}

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  return build_private_host_rows(context, tp_slice, lookup_slice, DeviceRowsLookup::kTpSlice);
}

void ask_plan_for(EngramConfig& config) {
  config.cpu_offload = true;
  config.dp_shared_memory = false;
}

std::string doctor_verdict(const DoctorFacts& facts) {
  return fmt::format("available: one table per replica, {} of host memory per rank at tp {} (its TP slice)",
                     format_gib(facts.tp_slice_bytes_max), facts.tp);
}

}  // namespace host_private_ops

Status lookup_host_private(Collectives& tp_group, const LookupRequest& request,
                           std::span<const std::byte> private_slice_bytes) {
  return lookup_tp_slice(tp_group, request, private_slice_bytes, "host_private: the private copy");
}

// As host_shared, from the replica's own copy: the same rows and links.
StepTime host_private_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  return host_slice_step(in, c);
}

Status host_private_ops::lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                   std::span<const std::byte> whole_table_bytes) {
  return lookup_host_private(tp_group, request, whole_table_bytes);
}

}  // namespace engram
