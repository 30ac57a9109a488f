// The registration table: one entry per placement, each defined with its
// placement (its header's k...Ops). A new placement is a new file, an
// enumerator in placement.h (and kPlacementCount) and one case here.
#include <fmt/format.h>

#include <array>
#include <string>

#include "core/base/text_excerpt.h"
#include "core/placements/device_collective.h"
#include "core/placements/device_head_sharded.h"
#include "core/placements/device_peer.h"
#include "core/placements/host_head_sharded.h"
#include "core/placements/host_private.h"
#include "core/placements/host_shared.h"
#include "core/placements/placement.h"
#include "core/placements/sglang_file.h"
#include "core/placements/sglang_numa_shared.h"
#include "core/placements/sglang_private.h"
#include "core/placements/sglang_shared.h"

namespace engram {
namespace {

// Each enumerator's one entry. -Werror=switch makes an enumerator without a
// case here a build error; the fall-through answers "not an enumerator".
constexpr const PlacementOps* entry_of(Placement placement) {
  switch (placement) {
    case Placement::kDeviceCollective: return &kDeviceCollectiveOps;
    case Placement::kDevicePeer: return &kDevicePeerOps;
    case Placement::kHostShared: return &kHostSharedOps;
    case Placement::kHostHeadSharded: return &kHostHeadShardedOps;
    case Placement::kHostPrivate: return &kHostPrivateOps;
    case Placement::kDeviceHeadSharded: return &kDeviceHeadShardedOps;
    case Placement::kSglangShared: return &kSglangSharedOps;
    case Placement::kSglangPrivate: return &kSglangPrivateOps;
    case Placement::kSglangNumaShared: return &kSglangNumaSharedOps;
    case Placement::kSglangFile: return &kSglangFileOps;
  }
  return nullptr;
}

// Whether `placement` is an enumerator with an entry. Asked instead of
// comparing entry_of's address with nullptr, which GCC does not treat as a
// constant expression under -fsanitize=undefined (null checks kept).
constexpr bool has_entry(Placement placement) {
  switch (placement) {
    case Placement::kDeviceCollective:
    case Placement::kDevicePeer:
    case Placement::kHostShared:
    case Placement::kHostHeadSharded:
    case Placement::kHostPrivate:
    case Placement::kDeviceHeadSharded:
    case Placement::kSglangShared:
    case Placement::kSglangPrivate:
    case Placement::kSglangNumaShared:
    case Placement::kSglangFile: return true;
  }
  return false;
}

constexpr bool entries_complete() {
  std::array<bool, kPlacementCount> doctor_position_taken{};
  for (size_t i = 0; i < kPlacementCount; ++i) {
    if (!has_entry(static_cast<Placement>(i))) return false;
    const PlacementOps* ops = entry_of(static_cast<Placement>(i));
    if (ops->id != static_cast<Placement>(i)) return false;
    const size_t position = static_cast<size_t>(ops->doctor_position);
    if (ops->doctor_position < 0 || position >= kPlacementCount || doctor_position_taken[position]) return false;
    doctor_position_taken[position] = true;
  }
  return true;
}

// kPlacementCount counts the enumerators: every value below it is one, the
// next is not (an enumerator appended without bumping the count fails here).
static_assert(!has_entry(static_cast<Placement>(kPlacementCount)),
              "placement.h: kPlacementCount is less than the Placement enumerators");
static_assert(entries_complete(),
              "placement_registry.cc: an enumerator without its entry, an entry out of Placement order, or two doctor "
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
  for (size_t i = 0; i < kPlacementCount; ++i) out[i] = *entry_of(static_cast<Placement>(i));
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

Result<Placement> parse_placement(std::string_view name) {
  std::string known;
  for (const PlacementOps& ops : placement_registry()) {
    if (name == ops.name) return ops.id;
    known += (known.empty() ? "" : ", ") + std::string(ops.name);
  }
  return invalid_argument(fmt::format("placement: unknown placement '{}'; known: {}", excerpt(name), known));
}

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
