#include "backends/ipc/iommu_probe.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace engram::ipc {

IommuFacts read_iommu_facts(const std::string& groups_dir) {
  IommuFacts facts;
  std::error_code ec;
  std::filesystem::directory_iterator it(groups_dir, ec);
  if (ec) return facts;
  facts.readable = true;
  for (const auto& entry : it) {
    std::ifstream in(entry.path() / "type");
    std::string type;
    if (!std::getline(in, type)) continue;  // not a group (or its type unreadable)
    while (!type.empty() && (type.back() == '\n' || type.back() == ' ')) type.pop_back();
    ++facts.group_count;
    ++facts.types[type];
    if (type == "DMA" || type == "DMA-FQ") facts.translated = true;
  }
  return facts;
}

std::string iommu_text(const IommuFacts& facts) {
  if (facts.group_count == 0) return "none (no IOMMU groups: devices reach host memory untranslated)";
  std::vector<std::string> counts;
  for (const auto& [type, n] : facts.types) counts.push_back(fmt::format("{} x{}", type, n));
  return fmt::format("{} ({} groups: {}){}", facts.translated ? "translated" : "not translated", facts.group_count,
                     fmt::join(counts, ", "),
                     facts.translated ? "; a GPU's reads of registered host tables go through it" : "");
}

}  // namespace engram::ipc
