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
#include "core/placements/placement_steps.h"
#include "sim/seed.h"

namespace engram::sim {

// Every fault site, defined here once: the enum, the names, the count, the
// checkpoint names, the swarm's aiming lists and the scenario parser's
// vocabulary all come from this table. A new site is one row here plus its
// checkpoint in the emulated backend that reaches it.
//
// X(enumerator, name, kind, reached_by, what it models)
//   kind kStep: a backend call fails with the error the real call gives; the
//     site's name is also a checkpoint where process faults can strike.
//   kind kProcess: something happens to the whole process at a checkpoint
//     (any step site, or "collective": entry to any collective), which a
//     planned fault names with `at`.
//   reached_by: which backend steps of a placement reach the site
//     (PlacementSteps bits, core/placements/placement_steps.h; each
//     placement's registration says which steps it runs): the swarm aims its
//     planned faults there so that a sweep fires every site.
#define ENGRAM_FAULT_SITES(X)                                                                                         \
  X(kExport, "export", kStep, kExportsDeviceMemory, "cuMemExportToShareableHandle")                                   \
  X(kSend, "send", kStep, kExportsDeviceMemory, "fd send over the Unix socket")                                       \
  X(kImport, "import", kStep, kExportsDeviceMemory, "cuMemImportFromShareableHandle")                                 \
  X(kMap, "map", kStep, kMapsDeviceMemory, "cuMemMap")                                                                \
  X(kAccess, "access", kStep, kMapsDeviceMemory, "cuMemSetAccess")                                                    \
  X(kShmCreate, "shm_create", kStep, kCreatesHostSegments, "shm_open + ftruncate")                                    \
  X(kShmWrite, "shm_write", kStep, kCreatesHostSegments, "touching the segment's pages (SIGBUS when tmpfs runs out)") \
  X(kRankDeath, "rank_death", kProcess, kRunsAnyStep, "the process dies at a checkpoint")                             \
  X(kHang, "hang", kProcess, kRunsAnyStep, "the process stops making progress at a checkpoint, for good")             \
  X(kSlow, "slow", kProcess, kRunsAnyStep,                                                                           \
    "the process stalls at a checkpoint for a delay of simulated time, and/or its links or GPU run slower from there")

enum class FaultSite : uint8_t {
#define ENGRAM_FAULT_SITE_ENUM(id, name, kind, reached_by, models) id,
  ENGRAM_FAULT_SITES(ENGRAM_FAULT_SITE_ENUM)
#undef ENGRAM_FAULT_SITE_ENUM
};

enum class FaultKind : uint8_t { kStep, kProcess };

struct FaultSiteInfo {
  FaultSite site;
  std::string_view name;
  FaultKind kind;
  uint8_t reached_by;  // PlacementSteps bits
  std::string_view models;
};

inline constexpr FaultSiteInfo kFaultSites[] = {
#define ENGRAM_FAULT_SITE_INFO(id, name, kind, reached_by, models) \
  {FaultSite::id, name, FaultKind::kind, static_cast<uint8_t>(reached_by), models},
    ENGRAM_FAULT_SITES(ENGRAM_FAULT_SITE_INFO)
#undef ENGRAM_FAULT_SITE_INFO
};
inline constexpr int kFaultSiteCount = static_cast<int>(std::size(kFaultSites));

constexpr bool fault_table_in_enum_order() {
  for (int i = 0; i < kFaultSiteCount; ++i)
    if (static_cast<int>(kFaultSites[i].site) != i) return false;
  return true;
}
static_assert(fault_table_in_enum_order());

inline constexpr const FaultSiteInfo& fault_site_info(FaultSite site) {
  return kFaultSites[static_cast<size_t>(site)];
}
const char* fault_site_name(FaultSite site);
Result<FaultSite> parse_fault_site(std::string_view name);
inline bool is_process_fault(FaultSite site) { return fault_site_info(site).kind == FaultKind::kProcess; }

// Checkpoints where a process fault (rank_death, hang, slow) may strike:
// every step site above plus "collective" (entry to any collective call).
inline constexpr std::string_view kCollectiveCheckpoint = "collective";
bool is_checkpoint(std::string_view name);
// "collective, export, send, ..." for messages.
std::string checkpoint_names();
std::string fault_site_names();  // "export, send, ..., slow"

// A rank's links or GPU slower than the step model's (core/placements/step_cost.h
// StepCostInput::slow_link_factor, slow_gpu_factor): every term over a link,
// or every on-GPU term, of its lookup steps takes this many times as long.
struct SlowFactors {
  double link = 1.0;
  double gpu = 1.0;
  bool any() const { return link != 1.0 || gpu != 1.0; }
};

struct PlannedFault {
  FaultSite site = FaultSite::kExport;
  int rank = 0;
  int occurrence = 1;  // 1 = the rank's first time at the site (process faults: at the checkpoint)
  // Process faults only: the checkpoint they strike at ("import",
  // "collective", ...); empty = count every checkpoint of the rank.
  std::string at;
  uint64_t delay_us = 0;  // slow only: the stall; 0 = the plan's slow_delay_us (none where `slower` is set)
  // slow only: from the checkpoint on, the rank's lookup steps price its
  // links / GPU this much slower (a degraded NVLink, a throttled GPU).
  SlowFactors slower;
};

struct FaultPlan {
  std::vector<PlannedFault> planned;
  // Per site, the chance that one visit fails (for process faults: that one
  // checkpoint strikes). Drawn from the run's "faults" sub-seed.
  std::array<double, kFaultSiteCount> rate{};
  // How long a slow fault stalls when its plan entry names no delay (and
  // for every rate-drawn one).
  uint64_t slow_delay_us = 5'000'000;

  FaultPlan& plan(FaultSite site, int rank, int occurrence = 1, std::string at = {}, uint64_t delay_us = 0,
                  SlowFactors slower = {}) {
    planned.push_back({site, rank, occurrence, std::move(at), delay_us, slower});
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
  uint64_t reached = 0;  // visits (for process faults: checkpoints passed)
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

// A process fault striking at a checkpoint.
struct CheckpointFault {
  FaultSite site = FaultSite::kRankDeath;  // a kProcess site
  uint64_t delay_us = 0;                   // slow: how long the process stalls
  SlowFactors slower;                      // slow: the rank's links / GPU from here on
};

class Faults {
 public:
  Faults(FaultPlan plan, uint64_t seed, int rank_count);

  // A visit of step site `site` by `rank`: true when the fault fires.
  bool fire(FaultSite site, int rank);
  // `rank` passes a checkpoint: the process fault that strikes there, if any
  // (death before hang before slow when several would).
  std::optional<CheckpointFault> at_checkpoint(std::string_view checkpoint, int rank);

  FaultReport report() const;

 private:
  void record_fired(FaultSite site, std::string event);

  FaultPlan plan_;
  Rng rng_;
  int rank_count_;
  std::vector<std::array<uint64_t, kFaultSiteCount>> visits_by_rank_;
  // Visits per checkpoint: step sites by index, then "collective", then all.
  std::vector<std::array<uint64_t, kFaultSiteCount + 2>> checkpoints_by_rank_;
  std::vector<bool> planned_fired_;
  FaultReport report_;
  bool process_faults_possible_ = false;  // a planned process fault or a rate for one
  uint64_t quiet_checkpoints_ = 0;        // checkpoints passed while none was possible
};

// Counts probe hits for one run (the emulator installs it while its ranks run).
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
