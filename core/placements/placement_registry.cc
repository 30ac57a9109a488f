// The registration table: one entry per placement, each defined in its own
// file. A new placement is a new file, an enumerator in placement.h and one
// line here.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/base/text_excerpt.h"
#include "core/placements/device_collective.h"
#include "core/placements/device_peer.h"
#include "core/placements/host_head_sharded.h"
#include "core/placements/host_private.h"
#include "core/placements/host_shared.h"
#include "core/placements/placement.h"

namespace engram {
namespace {

// In Placement order; checked once, on first use.
const std::vector<PlacementOps>& table() {
  static const std::vector<PlacementOps> ops = [] {
    std::vector<PlacementOps> out = {
        device_collective_ops(), device_peer_ops(), host_shared_ops(), host_head_sharded_ops(), host_private_ops(),
    };
    for (size_t i = 0; i < out.size(); ++i) {
      ENGRAM_CHECK_MSG(static_cast<size_t>(out[i].id) == i, "placement_registry.cc: an entry out of Placement order");
      ENGRAM_CHECK_MSG(out[i].name != nullptr && out[i].cost != nullptr && out[i].build != nullptr,
                       "placement_registry.cc: an entry without a name, a cost or a build");
    }
    return out;
  }();
  return ops;
}

}  // namespace

std::span<const PlacementOps> placement_registry() { return table(); }

const PlacementOps& placement_ops(Placement placement) {
  const size_t i = static_cast<size_t>(placement);
  ENGRAM_CHECK_MSG(i < table().size(), "a Placement value outside the registration table");
  return table()[i];
}

const char* placement_name(Placement placement) { return placement_ops(placement).name; }

bool is_device_placement(Placement placement) { return placement_ops(placement).needs_device; }

Result<Placement> parse_placement(std::string_view name) {
  std::string known;
  for (const PlacementOps& ops : placement_registry()) {
    if (name == ops.name) return ops.id;
    known += (known.empty() ? "" : ", ") + std::string(ops.name);
  }
  return invalid_argument(fmt::format("placement: unknown placement '{}'; known: {}", excerpt(name), known));
}

const char* placement_group_text(PlacementGroup group) {
  switch (group) {
    case PlacementGroup::kShardGroup: return "row shards";
    case PlacementGroup::kNodeLocalGroup: return "node-local DP group";
  }
  return "?";
}

Status needs_a_device(const RankBackend& backend, Placement placement) {
  // The device's memory and what runs on it come together.
  if (backend.device != nullptr && backend.compute != nullptr) return Status::ok();
  return Status(ErrorCode::kFailedPrecondition,
                fmt::format("{} needs a GPU, and this rank has none; set cpu_offload: true for a host placement",
                            placement_name(placement)),
                {backend.world_rank, -1, "start"});
}

Status PlacementTables::lookup_device_collective(int, const DeviceLookupRequest&) {
  return failed_precondition("the collective cross-check is built only by device_peer with collective_cross_check");
}

}  // namespace engram
