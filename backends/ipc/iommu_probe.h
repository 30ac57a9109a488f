// What the host's IOMMU does to a GPU's reads of host memory, from sysfs
// (/sys/kernel/iommu_groups/<n>/type): "DMA" or "DMA-FQ" groups translate
// every device access (a VM's default: "iommu: Default domain type:
// Translated"), "identity" groups pass through. A translated IOMMU makes a
// GPU's small reads of registered host tables slower (docs/perf_notes.md,
// "Host tables read by the GPU"); `doctor` says which this host has.
#pragma once

#include <map>
#include <string>

namespace engram::ipc {

struct IommuFacts {
  bool readable = false;              // the groups directory could be listed
  int group_count = 0;                // groups found; 0: no IOMMU in use
  std::map<std::string, int> types;   // each group type and how many groups have it
  bool translated = false;            // some group's type is DMA or DMA-FQ
};

// Never fails: an absent directory is no IOMMU (readable false, no groups).
IommuFacts read_iommu_facts(const std::string& groups_dir = "/sys/kernel/iommu_groups");

// "translated (12 groups: DMA-FQ x12)", "identity (passthrough, 3 groups)",
// "none (no IOMMU groups)".
std::string iommu_text(const IommuFacts& facts);

}  // namespace engram::ipc
