#include "sim/faults.h"

#include <fmt/format.h>

namespace engram::sim {

const char* fault_site_name(FaultSite site) {
  const auto i = static_cast<size_t>(site);
  return i < std::size(kFaultSites) ? kFaultSites[i].name.data() : "unknown";
}

std::string fault_site_names() {
  std::string out;
  for (const FaultSiteInfo& s : kFaultSites) out += fmt::format("{}{}", out.empty() ? "" : ", ", s.name);
  return out;
}

Result<FaultSite> parse_fault_site(std::string_view name) {
  for (const FaultSiteInfo& s : kFaultSites)
    if (name == s.name) return s.site;
  return invalid_argument(fmt::format("unknown fault site '{}': use one of {}", name, fault_site_names()));
}

namespace {
// A rank's visit counters per checkpoint: a step site's at its index, then
// "collective", then every checkpoint together.
constexpr size_t kCollectiveSlot = kFaultSiteCount;
constexpr size_t kAnyCheckpointSlot = kFaultSiteCount + 1;

// The counter slot of checkpoint `name`, or -1 when it is none.
int checkpoint_slot(std::string_view name) {
  if (name == kCollectiveCheckpoint) return static_cast<int>(kCollectiveSlot);
  for (const FaultSiteInfo& s : kFaultSites)
    if (s.kind == FaultKind::kStep && name == s.name) return static_cast<int>(s.site);
  return -1;
}
}  // namespace

bool is_checkpoint(std::string_view name) { return checkpoint_slot(name) >= 0; }

std::string checkpoint_names() {
  std::string out(kCollectiveCheckpoint);
  for (const FaultSiteInfo& s : kFaultSites)
    if (s.kind == FaultKind::kStep) out += fmt::format(", {}", s.name);
  return out;
}

// A delay as scenario files write it (delay_ms, slow_delay_ms): in ms
// where it is whole ms, else in us.
static std::string delay_text(uint64_t delay_us) {
  return delay_us % 1000 == 0 ? fmt::format("{} ms", delay_us / 1000) : fmt::format("{} us", delay_us);
}

std::string FaultPlan::to_string() const {
  std::string out;
  for (const auto& p : planned) {
    if (!out.empty()) out += "; ";
    out += fmt::format("{} rank {} #{}", fault_site_name(p.site), p.rank, p.occurrence);
    if (!p.at.empty()) out += " at " + p.at;
    if (p.site == FaultSite::kSlow) {
      if (p.delay_us != 0 || !p.slower.any()) out += " delay " + delay_text(p.delay_us ? p.delay_us : slow_delay_us);
      if (p.slower.link != 1.0) out += fmt::format(" links x{}", p.slower.link);
      if (p.slower.gpu != 1.0) out += fmt::format(" gpu x{}", p.slower.gpu);
    }
  }
  for (int i = 0; i < kFaultSiteCount; ++i)
    if (rate[static_cast<size_t>(i)] > 0) {
      if (!out.empty()) out += "; ";
      out += fmt::format("{} p={}", kFaultSites[static_cast<size_t>(i)].name, rate[static_cast<size_t>(i)]);
      if (kFaultSites[static_cast<size_t>(i)].site == FaultSite::kSlow) out += " delay " + delay_text(slow_delay_us);
    }
  return out.empty() ? "no faults" : out;
}

std::string FaultReport::to_string() const {
  std::string out = fmt::format("{:<12} {:>10} {:>8}", "site", "reached", "fired");
  for (const auto& s : sites)
    out += fmt::format("\n{:<12} {:>10} {:>8}{}", fault_site_name(s.site), s.reached, s.fired,
                       s.fired == 0 ? "  (never fired)" : "");
  for (const auto& p : never_fired)
    out += fmt::format("\nplanned but never reached: {} rank {} #{}{}", fault_site_name(p.site), p.rank,
                       p.occurrence, p.at.empty() ? "" : " at " + p.at);
  return out;
}

Faults::Faults(FaultPlan plan, uint64_t seed, int rank_count)
    : plan_(std::move(plan)),
      rng_(sub_seed(seed, "faults")),
      rank_count_(rank_count),
      visits_by_rank_(static_cast<size_t>(rank_count)),
      checkpoints_by_rank_(static_cast<size_t>(rank_count)),
      planned_fired_(plan_.planned.size(), false) {
  ENGRAM_CHECK(rank_count >= 1);
  for (const auto& p : plan_.planned) {
    ENGRAM_CHECK(p.rank >= 0 && p.rank < rank_count);
    ENGRAM_CHECK(p.occurrence >= 1);
    ENGRAM_CHECK(p.at.empty() || is_process_fault(p.site));
    ENGRAM_CHECK(p.delay_us == 0 || p.site == FaultSite::kSlow);
    ENGRAM_CHECK(!p.slower.any() || p.site == FaultSite::kSlow);
    ENGRAM_CHECK(p.slower.link >= 1.0 && p.slower.gpu >= 1.0);
  }
  for (int i = 0; i < kFaultSiteCount; ++i) report_.sites[static_cast<size_t>(i)].site = static_cast<FaultSite>(i);
  for (const auto& p : plan_.planned) process_faults_possible_ |= is_process_fault(p.site);
  for (const FaultSiteInfo& info : kFaultSites)
    process_faults_possible_ |= info.kind == FaultKind::kProcess && plan_.rate[static_cast<size_t>(info.site)] > 0;
}

void Faults::record_fired(FaultSite site, std::string event) {
  ++report_.sites[static_cast<size_t>(site)].fired;
  report_.fired_events.push_back(std::move(event));
}

bool Faults::fire(FaultSite site, int rank) {
  ENGRAM_CHECK(!is_process_fault(site));
  ENGRAM_CHECK(rank >= 0 && rank < rank_count_);
  const auto s = static_cast<size_t>(site);
  const uint64_t visit = ++visits_by_rank_[static_cast<size_t>(rank)][s];
  ++report_.sites[s].reached;
  bool fires = false;
  for (size_t i = 0; i < plan_.planned.size(); ++i) {
    const auto& p = plan_.planned[i];
    if (p.site == site && p.rank == rank && static_cast<uint64_t>(p.occurrence) == visit) {
      fires = true;
      planned_fired_[i] = true;
    }
  }
  // Draw only for sites with a rate, so adding a planned fault elsewhere
  // never shifts these draws.
  if (plan_.rate[s] > 0 && rng_.chance(plan_.rate[s])) fires = true;
  if (fires) record_fired(site, fmt::format("rank {} {} #{}", rank, fault_site_name(site), visit));
  return fires;
}

std::optional<CheckpointFault> Faults::at_checkpoint(std::string_view checkpoint, int rank) {
  ENGRAM_CHECK(rank >= 0 && rank < rank_count_);
  const int slot = checkpoint_slot(checkpoint);
  ENGRAM_CHECK(slot >= 0);
  if (!process_faults_possible_) {
    // Nothing can strike and nothing is drawn: count the visit, which
    // report() adds to every process site's reached.
    ++quiet_checkpoints_;
    return std::nullopt;
  }
  auto& counters = checkpoints_by_rank_[static_cast<size_t>(rank)];
  const uint64_t any_visit = ++counters[kAnyCheckpointSlot];
  const uint64_t site_visit = ++counters[static_cast<size_t>(slot)];

  // Every process site is reached and drawn for at every checkpoint (in
  // table order, whatever strikes), so the draws never depend on outcomes.
  std::optional<CheckpointFault> strikes;
  for (const FaultSiteInfo& info : kFaultSites) {
    if (info.kind != FaultKind::kProcess) continue;
    const auto s = static_cast<size_t>(info.site);
    ++report_.sites[s].reached;
    bool fires = false;
    uint64_t delay_us = plan_.slow_delay_us;
    SlowFactors slower;
    for (size_t i = 0; i < plan_.planned.size(); ++i) {
      const auto& p = plan_.planned[i];
      if (p.site != info.site || p.rank != rank) continue;
      const uint64_t visit = p.at.empty() ? any_visit : (p.at == checkpoint ? site_visit : 0);
      if (visit == static_cast<uint64_t>(p.occurrence) && !strikes) {
        fires = true;
        planned_fired_[i] = true;
        // A slower link or GPU stalls only where its entry names a delay too.
        if (p.delay_us != 0 || p.slower.any()) delay_us = p.delay_us;
        slower = p.slower;
      }
    }
    if (plan_.rate[s] > 0 && rng_.chance(plan_.rate[s]) && !strikes) fires = true;
    if (fires) {
      record_fired(info.site, fmt::format("rank {} {} at {} #{}", rank, info.name, checkpoint, site_visit));
      const bool slow = info.site == FaultSite::kSlow;
      strikes = CheckpointFault{info.site, slow ? delay_us : 0, slow ? slower : SlowFactors{}};
    }
  }
  return strikes;
}

FaultReport Faults::report() const {
  FaultReport out = report_;
  for (const FaultSiteInfo& info : kFaultSites)
    if (info.kind == FaultKind::kProcess) out.sites[static_cast<size_t>(info.site)].reached += quiet_checkpoints_;
  for (size_t i = 0; i < plan_.planned.size(); ++i)
    if (!planned_fired_[i]) out.never_fired.push_back(plan_.planned[i]);
  return out;
}

void CoverageCounters::hit(std::string_view probe) {
  auto it = counts_.find(probe);
  if (it == counts_.end()) it = counts_.emplace(std::string(probe), 0).first;
  ++it->second;
}

uint64_t CoverageCounters::count(std::string_view probe) const {
  auto it = counts_.find(probe);
  return it == counts_.end() ? 0 : it->second;
}

std::string CoverageCounters::to_string() const {
  std::string out;
  for (const auto& [name, n] : counts_) out += fmt::format("{}{:>8}  {}", out.empty() ? "" : "\n", n, name);
  return out.empty() ? "no probes hit" : out;
}

}  // namespace engram::sim
