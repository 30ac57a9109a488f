// Which placement (docs/design.md section 2), as plain data generated from
// the one list (placement_list.h), so what users write (config.placement)
// is checked below the placements themselves (core/placements/placement.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/base/status.h"
#include "core/deployment/placement_list.h"

namespace engram {

enum class Placement : uint8_t {
#define ENGRAM_PLACEMENT_ENUMERATOR(enumerator, name) enumerator,
  ENGRAM_PLACEMENTS(ENGRAM_PLACEMENT_ENUMERATOR)
#undef ENGRAM_PLACEMENT_ENUMERATOR
};

#define ENGRAM_PLACEMENT_ONE(enumerator, name) +1
inline constexpr size_t kPlacementCount = 0 ENGRAM_PLACEMENTS(ENGRAM_PLACEMENT_ONE);
#undef ENGRAM_PLACEMENT_ONE

// What users read and write ("device_collective"), in Placement order.
inline constexpr std::array<std::string_view, kPlacementCount> kPlacementNames = {
#define ENGRAM_PLACEMENT_NAME(enumerator, name) #name,
    ENGRAM_PLACEMENTS(ENGRAM_PLACEMENT_NAME)
#undef ENGRAM_PLACEMENT_NAME
};

// A registered placement by name, or invalid_argument naming the known ones.
Result<Placement> parse_placement(std::string_view name);

}  // namespace engram
