// The registration table: one entry per row of core/deployment/placement_list.h,
// each defined with its placement (its header's k...Ops, the headers listed
// by placement_headers.h, which core/CMakeLists.txt generates from those
// rows). A new placement is a new file pair and one row in the list.
#include <fmt/format.h>

#include <array>
#include <string>

#include "core/placements/placement.h"
#include "placement_headers.h"

namespace engram {
namespace {

// Each row's entry, in Placement order (the enum comes from the same rows).
constexpr std::array<const PlacementOps*, kPlacementCount> kEntries = {
#define ENGRAM_PLACEMENT_ENTRY(enumerator, name) &enumerator##Ops,
    ENGRAM_PLACEMENTS(ENGRAM_PLACEMENT_ENTRY)
#undef ENGRAM_PLACEMENT_ENTRY
};

// Each entry is its row's: its id and name; no two doctor positions alike.
constexpr bool entries_complete() {
  std::array<bool, kPlacementCount> doctor_position_taken{};
  for (size_t i = 0; i < kPlacementCount; ++i) {
    const PlacementOps* ops = kEntries[i];
    if (ops->id != static_cast<Placement>(i) || kPlacementNames[i] != std::string_view(ops->name)) return false;
    const size_t position = static_cast<size_t>(ops->doctor_position);
    if (ops->doctor_position < 0 || position >= kPlacementCount || doctor_position_taken[position]) return false;
    doctor_position_taken[position] = true;
  }
  return true;
}

static_assert(entries_complete(),
              "placement_registry.cc: an entry whose id or name is not its row's in placement_list.h, or two doctor "
              "positions alike");

// The hooks, checked once when the table is first asked for: GCC does not
// take a function's address compared with nullptr as a constant expression
// under -fsanitize=undefined, so this half cannot be a static_assert.
bool hooks_complete(const PlacementOps& ops) {
  return ops.name != nullptr && ops.cost != nullptr && ops.step_time != nullptr && ops.build != nullptr &&
         ops.doctor_verdict != nullptr &&
         // A device placement is checked for a device before it builds.
         ops.needs_device == (ops.capable != nullptr);
}

constexpr std::array<PlacementOps, kPlacementCount> make_table() {
  std::array<PlacementOps, kPlacementCount> out{};
  for (size_t i = 0; i < kPlacementCount; ++i) out[i] = *kEntries[i];
  return out;
}

// In Placement order.
constexpr std::array<PlacementOps, kPlacementCount> kTable = make_table();

}  // namespace

const std::array<PlacementOps, kPlacementCount>& checked_table() {
  static const bool complete = [] {
    for (const PlacementOps& ops : kTable)
      ENGRAM_CHECK_MSG(hooks_complete(ops), "a placement entry without a name, cost, step time, build or doctor verdict, or a "
                                            "device placement without its capability check (or the reverse)");
    return true;
  }();
  ENGRAM_CHECK(complete);
  return kTable;
}

std::span<const PlacementOps> placement_registry() { return checked_table(); }

const PlacementOps& placement_ops(Placement placement) {
  const size_t i = static_cast<size_t>(placement);
  ENGRAM_CHECK_MSG(i < kTable.size(), "a Placement value outside the registration table");
  return checked_table()[i];
}

const char* placement_name(Placement placement) { return placement_ops(placement).name; }

bool is_device_placement(Placement placement) { return placement_ops(placement).needs_device; }

const char* placement_group_text(const PlacementOps& ops) {
  if (ops.group_text != nullptr) return ops.group_text;
  switch (ops.group) {
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

std::string report_tp_slice_heads(int heads, int tp, int group_size) {
  ENGRAM_CHECK(tp >= 1);
  if (tp == 1) return "";
  return fmt::format("; each TP rank holds a slice of {} of the {} heads", (heads + tp - 1) / tp, heads);
}

Status PlacementTables::lookup_device_collective(int, const DeviceLookupRequest&) {
  return failed_precondition("the collective cross-check is built only by device_peer with collective_cross_check");
}

}  // namespace engram
