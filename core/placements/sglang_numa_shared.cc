#include "core/placements/sglang_numa_shared.h"
#include "core/placements/host_slice_step.h"

#include <fmt/format.h>

#include "core/base/units.h"
#include "core/base/warnings.h"
#include "core/deployment/deployment.h"
#include "core/placements/shared_host_copy.h"

namespace engram {
namespace sglang_numa_shared_ops {

PlacementCost cost(const ModelSpec& model, const PlacementCostInput&) {
  return {.host_shared_mapped_bytes = model.table_bytes_total(),
          .table_copy = TableCopyScope::kNumaNode,
          .host_shared_copy_bytes = model.table_bytes_total()};
}

Result<std::unique_ptr<PlacementTables>> build(PlacementContext& context) {
  std::optional<int> node = context.backend.probe ? context.backend.probe->gpu_numa_node() : std::nullopt;
  if (!node) {
    WarningSink::process().emit(
        {"sglang_numa_shared.numa_node_unknown",
         "sglang_numa_shared: the NUMA node of this rank's GPU is unknown here (no GPU, or sysfs numa_node says -1); "
         "it counts as node 0, so the host keeps one copy as sglang_shared does (SGLang itself refuses an "
         "unresolved NUMA node)"});
    node = 0;
  }
  // The host's ranks by their GPU's node; every rank of the host takes part.
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<Collectives> numa_group,
                          context.host_group.split(*node, context.host_group.world_rank()));
  Collectives& group = *numa_group;
  return build_shared_host_copy(context, group, std::move(numa_group), HostCopyBacking::kMemfd, "sglang_numa_shared");
}

void ask_plan_for(EngramConfig& config) {
  config.cpu_offload = true;
  config.placement = "sglang_numa_shared";
}

std::string doctor_verdict(const DoctorFacts& facts) {
  return fmt::format("available where this node's ranks share one PID namespace: one memfd copy ({}) per NUMA node "
                     "of the GPUs, each rank mapping its node's",
                     format_gib(facts.tables_bytes));
}

}  // namespace sglang_numa_shared_ops
// A memfd copy per NUMA node: read as host_shared reads.
StepTime sglang_numa_shared_ops::step_time(const StepCostInput& in, const StepConstants& c) {
  return host_slice_step(in, c);
}

Status sglang_numa_shared_ops::lookup_from_whole_table(Collectives& group, Collectives& tp_group, const LookupRequest& request,
                                   std::span<const std::byte> whole_table_bytes) {
  return lookup_host_copy(tp_group, request, whole_table_bytes, "sglang_numa_shared");
}

}  // namespace engram
