#include "sim/faults.h"

#include <fmt/format.h>

namespace engram::sim {

namespace {
constexpr std::array<const char*, kFaultSiteCount> kSiteNames = {
    "export", "send", "import", "map", "access", "shm_create", "shm_write", "rank_death"};
}

const char* fault_site_name(FaultSite site) {
  auto i = static_cast<size_t>(site);
  return i < kSiteNames.size() ? kSiteNames[i] : "unknown";
}

Result<FaultSite> parse_fault_site(std::string_view name) {
  for (size_t i = 0; i < kSiteNames.size(); ++i)
    if (name == kSiteNames[i]) return static_cast<FaultSite>(i);
  return invalid_argument(fmt::format(
      "unknown fault site '{}': use one of export, send, import, map, access, shm_create, shm_write, rank_death",
      name));
}

std::string FaultPlan::to_string() const {
  std::string out;
  for (const auto& p : planned) {
    if (!out.empty()) out += "; ";
    out += fmt::format("{} rank {} #{}", fault_site_name(p.site), p.rank, p.occurrence);
    if (!p.at.empty()) out += " at " + p.at;
  }
  for (int i = 0; i < kFaultSiteCount; ++i)
    if (rate[static_cast<size_t>(i)] > 0) {
      if (!out.empty()) out += "; ";
      out += fmt::format("{} p={}", kSiteNames[static_cast<size_t>(i)], rate[static_cast<size_t>(i)]);
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
    ENGRAM_CHECK(p.at.empty() || p.site == FaultSite::kRankDeath);
  }
  for (int i = 0; i < kFaultSiteCount; ++i) report_.sites[static_cast<size_t>(i)].site = static_cast<FaultSite>(i);
}

bool Faults::fire(FaultSite site, int rank) {
  ENGRAM_CHECK(site != FaultSite::kRankDeath);
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
  if (fires) {
    ++report_.sites[s].fired;
    report_.fired_events.push_back(fmt::format("rank {} {} #{}", rank, fault_site_name(site), visit));
  }
  return fires;
}

bool Faults::dies(std::string_view checkpoint, int rank) {
  ENGRAM_CHECK(rank >= 0 && rank < rank_count_);
  const auto d = static_cast<size_t>(FaultSite::kRankDeath);
  auto& counters = checkpoints_by_rank_[static_cast<size_t>(rank)];
  const uint64_t any_visit = ++counters[""];
  auto it = counters.find(checkpoint);
  if (it == counters.end()) it = counters.emplace(std::string(checkpoint), 0).first;
  const uint64_t site_visit = ++it->second;
  ++report_.sites[d].reached;
  bool dies = false;
  for (size_t i = 0; i < plan_.planned.size(); ++i) {
    const auto& p = plan_.planned[i];
    if (p.site != FaultSite::kRankDeath || p.rank != rank) continue;
    uint64_t visit = p.at.empty() ? any_visit : (p.at == checkpoint ? site_visit : 0);
    if (visit == static_cast<uint64_t>(p.occurrence)) {
      dies = true;
      planned_fired_[i] = true;
    }
  }
  if (plan_.rate[d] > 0 && rng_.chance(plan_.rate[d])) dies = true;
  if (dies) {
    ++report_.sites[d].fired;
    report_.fired_events.push_back(fmt::format("rank {} rank_death at {} #{}", rank, checkpoint, site_visit));
  }
  return dies;
}

FaultReport Faults::report() const {
  FaultReport out = report_;
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
