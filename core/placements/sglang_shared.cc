#include "core/placements/sglang_shared.h"
#include "core/placements/host_slice_step.h"

#include <fmt/format.h>

#include "core/base/units.h"
#include "core/deployment/deployment.h"
#include "core/placements/shared_host_copy.h"

namespace engram {
namespace sglang_shared_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput&) {
  return {.host_shared_mapped_bytes = model.table_bytes_total(),
          .table_copy = TableCopyScope::kHost,
          .host_shared_copy_bytes = model.table_bytes_total()};
}

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  return build_shared_host_copy(context, context.host_group, nullptr, HostCopyBacking::kMemfd, "sglang_shared");
}

void ask_plan_for(EngramConfig& config) {
  config.cpu_offload = true;
  config.placement = "sglang_shared";
}

std::string doctor_verdict(const DoctorFacts& facts) {
  return fmt::format("available where this node's ranks share one PID namespace and the job is on this node "
                     "(SGLang's TP group shares one memfd): one memfd copy ({}), opened by the other ranks through "
                     "/proc/<pid>/fd; not bounded by /dev/shm",
                     format_gib(facts.tables_bytes));
}

}  // namespace sglang_shared_ops
// The node's memfd copy registered for the GPU: read as host_shared reads.
StepTime sglang_shared_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  return host_slice_step(in, c);
}

Status sglang_shared_ops::lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                   std::span<const std::byte> whole_table_bytes) {
  return lookup_host_copy(tp_group, request, whole_table_bytes, "sglang_shared");
}

}  // namespace engram
