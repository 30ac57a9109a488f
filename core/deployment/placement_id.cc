#include "core/deployment/placement_id.h"

#include <fmt/format.h>

#include <string>

#include "core/base/text_excerpt.h"

namespace engram {

Result<Placement> parse_placement(std::string_view name) {
  std::string known;
  for (size_t i = 0; i < kPlacementCount; ++i) {
    if (name == kPlacementNames[i]) return static_cast<Placement>(i);
    known += (known.empty() ? "" : ", ") + std::string(kPlacementNames[i]);
  }
  return invalid_argument(fmt::format("placement: unknown placement '{}'; known: {}", excerpt(name), known));
}

}  // namespace engram
