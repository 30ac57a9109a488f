#include "core/placements/sglang_file.h"
#include "core/placements/host_slice_step.h"

#include <fmt/format.h>

#include "core/base/units.h"
#include "core/deployment/deployment.h"
#include "core/placements/shared_host_copy.h"

namespace engram {
namespace sglang_file_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput&) {
  // The page cache: one copy per node, charged to the writer that touched it;
  // nothing pinned (host_pinned_bytes stays 0).
  return {.host_shared_mapped_bytes = model.table_bytes_total(),
          .table_copy = TableCopyScope::kHost,
          .host_shared_copy_bytes = model.table_bytes_total()};
}

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  return build_shared_host_copy(context, context.host_group, nullptr, HostCopyBacking::kFile, "sglang_file");
}

void ask_plan_for(EngramConfig& config) {
  config.cpu_offload = true;
  config.placement = "sglang_file";
}

std::string doctor_verdict(const DoctorFacts& facts) {
  return fmt::format("available: one table file per node mapped MAP_SHARED, unpinned ({} of page cache)",
                     format_gib(facts.tables_bytes));
}

}  // namespace sglang_file_ops
// A table file mapped MAP_SHARED, unpinned: the GPU cannot address it, so
// the CPU gathers every row and copies them over.
StepTime sglang_file_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  return host_slice_step(in, c, /*cpu_gathers=*/true);
}

Status sglang_file_ops::lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                   std::span<const std::byte> whole_table_bytes) {
  return lookup_host_copy(tp_group, request, whole_table_bytes, "sglang_file");
}

}  // namespace engram
