#include "core/base/size_text.h"

#include <fmt/format.h>

#include "core/base/units.h"

namespace engram {

std::string format_size_short(uint64_t bytes) {
  auto scaled = [&](uint64_t unit, const char* name) {
    if (bytes % unit == 0) return fmt::format("{} {}", bytes / unit, name);
    return fmt::format("{:.1f} {}", static_cast<double>(bytes) / static_cast<double>(unit), name);
  };
  if (bytes >= kGiB) {
    // Always one decimal in GiB so table sizes read alike ("190.0 GiB").
    return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
  }
  if (bytes >= kMiB) return scaled(kMiB, "MiB");
  if (bytes >= kKiB) return scaled(kKiB, "KiB");
  return fmt::format("{} B", bytes);
}

}  // namespace engram
