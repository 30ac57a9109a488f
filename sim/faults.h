// Fault injection for the emulator: named sites in the emulated backends
// that fail by plan (site + rank + nth occurrence) or by seeded probability,
// a report of how often each site was reached and fired (so a fault that
// never fires is visible), and coverage counters of rare paths.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/coverage_probe.h"
#include "core/base/status.h"
#include "sim/seed.h"

namespace engram::sim {

enum class FaultSite : uint8_t {
  kExport,     // cuMemExportToShareableHandle
  kSend,       // fd send over the Unix socket
  kImport,     // cuMemImportFromShareableHandle
  kMap,        // cuMemMap
  kAccess,     // cuMemSetAccess
  kShmCreate,  // shm_open + ftruncate
  kShmWrite,   // touching the segment's pages (SIGBUS when tmpfs runs out)
  kRankDeath,  // the process dies at a checkpoint
};
inline constexpr int kFaultSiteCount = 8;
const char* fault_site_name(FaultSite site);
Result<FaultSite> parse_fault_site(std::string_view name);

// Checkpoints where a rank may die: every fault site above plus "collective"
// (entry to any collective call).
inline constexpr std::string_view kCollectiveCheckpoint = "collective";

struct PlannedFault {
  FaultSite site = FaultSite::kExport;
  int rank = 0;
  int occurrence = 1;  // 1 = the rank's first time at the site
  // kRankDeath only: the checkpoint it dies at ("import", "collective", ...);
  // empty = count every checkpoint of the rank.
  std::string at;
};

struct FaultPlan {
  std::vector<PlannedFault> planned;
  // Per site, the chance that one visit fails (for kRankDeath: that one
  // checkpoint kills the rank). Drawn from the run's "faults" sub-seed.
  std::array<double, kFaultSiteCount> rate{};

  FaultPlan& plan(FaultSite site, int rank, int occurrence = 1, std::string at = {}) {
    planned.push_back({site, rank, occurrence, std::move(at)});
    return *this;
  }
  FaultPlan& with_rate(FaultSite site, double probability) {
    rate[static_cast<size_t>(site)] = probability;
    return *this;
  }
  std::string to_string() const;
};

struct FaultSiteReport {
  FaultSite site = FaultSite::kExport;
  uint64_t reached = 0;  // visits (for rank_death: checkpoints passed)
  uint64_t fired = 0;
};

struct FaultReport {
  std::array<FaultSiteReport, kFaultSiteCount> sites{};
  std::vector<std::string> fired_events;  // "rank 3 import #2", in firing order
  // Planned faults whose occurrence never came (a plan that tested nothing).
  std::vector<PlannedFault> never_fired;

  uint64_t fired(FaultSite site) const { return sites[static_cast<size_t>(site)].fired; }
  uint64_t reached(FaultSite site) const { return sites[static_cast<size_t>(site)].reached; }
  std::string to_string() const;  // a table: site, reached, fired
};

class Faults {
 public:
  Faults(FaultPlan plan, uint64_t seed, int rank_count);

  // A visit of `site` by `rank`: true when the fault fires. Not for kRankDeath.
  bool fire(FaultSite site, int rank);
  // A checkpoint: true when `rank` dies here.
  bool dies(std::string_view checkpoint, int rank);

  FaultReport report() const;

 private:
  FaultPlan plan_;
  Rng rng_;
  int rank_count_;
  std::vector<std::array<uint64_t, kFaultSiteCount>> visits_by_rank_;
  std::vector<std::map<std::string, uint64_t, std::less<>>> checkpoints_by_rank_;  // "" = all
  std::vector<bool> planned_fired_;
  FaultReport report_;
};

// Counts probe hits for one run (the emulator installs it on every rank thread).
class CoverageCounters final : public CoverageSink {
 public:
  void hit(std::string_view probe) override;
  const std::map<std::string, uint64_t, std::less<>>& counts() const { return counts_; }
  uint64_t count(std::string_view probe) const;
  std::string to_string() const;

 private:
  std::map<std::string, uint64_t, std::less<>> counts_;
};

}  // namespace engram::sim
