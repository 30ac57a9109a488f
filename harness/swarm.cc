#include "harness/swarm.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>

#include "core/base/units.h"
#include "core/base/warnings.h"
#include "core/plan/deployment_plan.h"
#include "core/deployment/shard_groups.h"
#include "harness/scenario_check.h"
#include "sim/seed.h"

namespace engram::sim {
namespace {

template <typename T, size_t N>
const T& pick(Rng& rng, const T (&options)[N]) {
  return options[rng.below(N)];
}

std::string shm_text(const HostSpec& h) {
  if (!h.shm_mounted) return "none";
  return format_bytes(h.tmpfs_bytes_total);
}

std::string describe(const Deployment& d, const FaultPlan& faults, const ScenarioLookup& lookup) {
  std::string hosts;
  for (const HostSpec& h : d.hosts)
    hosts += fmt::format("{}{}:{}x{} shm={}{}{}{}{}", hosts.empty() ? "" : " ", h.name, h.gpu_count, h.gpu_model,
                         shm_text(h), h.nvlink_domain.empty() ? "" : " nvl=" + h.nvlink_domain,
                         h.imex_channel ? " imex" : "", h.fabric_attribute ? " fabric" : "",
                         h.visible_gpus_per_rank == 1 ? " one-gpu-containers" : "");
  std::string rank_hosts;
  if (!d.rank_hosts.empty()) {
    rank_hosts = " rank_hosts=";
    for (int h : d.rank_hosts) rank_hosts += std::to_string(h);
  }
  return fmt::format(
      "[{}]{} tp={} dp={}{}{} offload={} peer={} dp_shared_memory={} shard_group={} tokens={}{} timeouts={}/{}ms "
      "faults: {}",
      hosts, rank_hosts, d.layout.tp, d.layout.dp, d.layout.elastic_ep ? " elastic_ep" : "",
      d.config.sequence_parallel ? " sequence_parallel" : "", d.config.cpu_offload,
      d.config.peer_shards,
      d.config.dp_shared_memory ? (*d.config.dp_shared_memory ? "true" : "false") : "unset",
      shard_group_name(d.config.shard_group), lookup.tokens, lookup.model == "tiny" ? "" : " model=" + lookup.model,
      d.timeouts.collective_ms, d.timeouts.join_ms,
      faults.to_string());
}

std::string outcome_of(const EmulatedOutcome& out) {
  if (!out.error) return "ok " + placement_summary(out);
  const Status& e = *out.error;
  return fmt::format("error {} ({})", error_code_name(e.code()), e.context().step.empty() ? "?" : e.context().step);
}

void check_invariants(const EmulatedJob& job, const EmulatedOutcome& out, std::vector<std::string>& v) {
  if (out.emulator_refused) {
    v.push_back("the swarm drew a job the emulator or plan refused outright: " +
                (out.error ? out.error->to_string() : std::string("?")));
    return;
  }
  const size_t n = out.ranks.size();
  // A /dev/shm segment outlives its creator, as a tmpfs file does. Survivors
  // on its host must remove it; where every rank of that host died there is
  // nobody left, and the next start finds it stale (backends/shm reports and
  // cleans it). Anything else still live is a leak.
  std::vector<LedgerEntry> leaks;
  for (const LedgerEntry& e : out.world.leaks) {
    bool host_all_dead = false;
    if (e.kind == ResourceKind::kShmSegment && e.rank >= 0 && static_cast<size_t>(e.rank) < n) {
      const int host = out.deployment.rank_hosts[static_cast<size_t>(e.rank)];
      host_all_dead = true;
      for (size_t r = 0; r < n; ++r)
        if (out.deployment.rank_hosts[r] == host && !out.world.died[r]) host_all_dead = false;
    }
    if (!host_all_dead) leaks.push_back(e);
  }
  if (!leaks.empty()) v.push_back("leaks after the run: " + Ledger::format(leaks, 5));

  // Ranks of a host that took a host placement decided alike.
  std::map<int, std::set<Placement>> host_placements;
  for (size_t r = 0; r < n; ++r) {
    auto p = decided_placement(out.plan, out.ranks, r);
    if (p && !is_device_placement(*p)) host_placements[out.deployment.rank_hosts[r]].insert(*p);
  }
  for (const auto& [host, set] : host_placements)
    if (set.size() > 1) {
      std::string names;
      for (Placement p : set) names += fmt::format("{}{}", names.empty() ? "" : ", ", placement_name(p));
      v.push_back(fmt::format("host {} ({}): its ranks took different host placements: {}", host,
                              out.deployment.hosts[static_cast<size_t>(host)].name, names));
    }

  // Every run ends, with success or a named error, within its bound in
  // simulated time, and no wait was left without a deadline.
  if (!out.world.live()) v.push_back(out.world.liveness_text());

  // Every error names a rank and a step.
  for (size_t r = 0; r < n; ++r) {
    const Status& s = out.world.statuses[r];
    if (!s.is_ok() && (s.context().rank < 0 || s.context().step.empty()))
      v.push_back(fmt::format("rank {}: an error without a rank or a step: {}", r, s.to_string()));
  }

  // Lookups equal the direct lookup wherever they ran; a successful run ran them all.
  for (size_t r = 0; r < n; ++r) {
    if (!out.ranks[r].lookup_mismatch.empty())
      v.push_back(fmt::format("rank {} ({}): lookup differs from the direct lookup: {}", r,
                              placement_name(out.ranks[r].placement), out.ranks[r].lookup_mismatch));
    if (!out.error && job.lookup.run && !out.ranks[r].looked_up)
      v.push_back(fmt::format("rank {}: the run succeeded but its lookups did not complete", r));
  }

  // The runtime decides as plan does (the same check scenarios make).
  check_plan_matches_runtime(out.plan, out.error, out.ranks, out.warnings, !out.world.faults.fired_events.empty(), v);
}

std::string rank_outcomes(const EmulatedOutcome& out) {
  std::string text;
  for (size_t r = 0; r < out.ranks.size(); ++r)
    text += fmt::format("{}:{}:{}:{};", r, out.ranks[r].started ? placement_name(out.ranks[r].placement) : "-",
                        out.world.statuses.size() > r ? out.world.statuses[r].to_string() : "?",
                        out.ranks[r].looked_up);
  return text;
}

// Which step sites the deployment's planned placements reach (FaultReach
// bits); a deployment the planner refuses reaches none.
uint8_t sites_reached_by_plan(const Deployment& d) {
  WarningSink quiet;
  Result<PlanResult> plan = plan_deployment(d, quiet);
  if (!plan.is_ok()) return 0;
  uint8_t reach = 0;
  for (const RankPlan& r : plan->ranks) {
    if (r.placement == Placement::kDevicePeer) reach |= kByPeerShards;
    if (r.placement == Placement::kDeviceCollective) reach |= kByDeviceCollective;
    if (r.placement == Placement::kHostShared) reach |= kByHostTables;
  }
  return reach;
}

}  // namespace

SwarmCase draw_swarm_case(uint64_t seed) {
  Rng rng(sub_seed(seed, "swarm"));
  Deployment d;
  d.model = "deepseek-v4.1-flash";
  const char* gpu_models[] = {"H100", "H200", "B200", "GB200", "B300", "GB300"};
  const uint64_t shm_sizes[] = {190 * kGiB, 64 * kMiB, 0 /* missing */, 512 * kGiB, 100 * kGiB, 256 * kGiB};

  if (rng.chance(0.03)) {
    // A small rack: trays of 4 GPUs in one NVLink domain with IMEX (sometimes one tray lacks it).
    const int trays = 2 + static_cast<int>(rng.below(4));
    for (int t = 0; t < trays; ++t) {
      HostSpec h;
      h.name = fmt::format("tray{}", t);
      h.gpu_count = 4;
      h.gpu_model = "GB300";
      h.nvlink_domain = "nvl72-rack0";
      h.imex_channel = true;
      h.fabric_attribute = true;
      h.tmpfs_bytes_total = rng.chance(0.5) ? 512 * kGiB : 64 * kMiB;
      d.hosts.push_back(h);
    }
    if (rng.chance(0.2)) d.hosts[rng.below(d.hosts.size())].imex_channel = false;
  } else {
    // Small worlds mostly (at most 16 ranks): a sweep of 2,000 seeds stays well under a minute.
    const int host_count = 1 + static_cast<int>(rng.below(4));
    const int gpu_options[] = {1, 2, 2, 4, 4, 8};
    const int gpus = std::min(pick(rng, gpu_options), host_count > 2 ? 4 : 8);
    const std::string model = pick(rng, gpu_models);
    const bool same_shm = rng.chance(0.8);
    const uint64_t shm = pick(rng, shm_sizes);
    const int domain_kind = static_cast<int>(rng.below(3));  // 0 none, 1 shared, 2 per host
    const bool imex = rng.chance(0.6);
    const bool fabric = rng.chance(0.7);
    const bool one_gpu_containers = rng.chance(0.08);
    for (int i = 0; i < host_count; ++i) {
      HostSpec h;
      h.name = fmt::format("n{}", i);
      h.gpu_count = gpus;
      h.gpu_model = model;
      const uint64_t size = same_shm ? shm : pick(rng, shm_sizes);
      h.shm_mounted = size != 0;
      h.tmpfs_bytes_total = size;
      h.nvlink_domain = domain_kind == 0 ? "" : domain_kind == 1 ? "nvl-0" : fmt::format("nvl-{}", i);
      h.imex_channel = rng.chance(0.9) ? imex : !imex;
      h.fabric_attribute = fabric;
      h.visible_gpus_per_rank = one_gpu_containers ? 1 : 0;
      d.hosts.push_back(h);
    }
  }

  int world = 0;
  for (const HostSpec& h : d.hosts) world += h.gpu_count;
  std::vector<int> tps;
  for (int tp = 1; tp <= std::min(world, 8); ++tp)
    if (world % tp == 0) tps.push_back(tp);
  // Half the draws DP only (tp = 1), so hosts often hold several replicas.
  d.layout.tp = rng.chance(0.5) ? 1 : tps[rng.below(tps.size())];
  d.layout.dp = world / d.layout.tp;
  d.layout.elastic_ep = rng.chance(0.1);
  if (rng.chance(0.2)) {
    // Interleave: the same per-host counts in a shuffled order.
    for (size_t h = 0; h < d.hosts.size(); ++h)
      for (int g = 0; g < d.hosts[h].gpu_count; ++g) d.rank_hosts.push_back(static_cast<int>(h));
    for (size_t i = d.rank_hosts.size(); i > 1; --i) std::swap(d.rank_hosts[i - 1], d.rank_hosts[rng.below(i)]);
  }

  d.config.cpu_offload = rng.chance(0.55);
  d.config.peer_shards = rng.chance(0.35);
  const uint64_t tri = rng.below(5);
  if (tri == 3) d.config.dp_shared_memory = true;
  if (tri == 4) d.config.dp_shared_memory = false;
  const ShardGroup groups[] = {ShardGroup::kWorld, ShardGroup::kWorld, ShardGroup::kNvlinkDomain, ShardGroup::kHost};
  d.config.shard_group = pick(rng, groups);

  // Timeouts: mostly the defaults, sometimes short ones (so a slow fault
  // below the default outlasts them).
  if (rng.chance(0.25)) {
    const uint64_t collective_ms[] = {2000, 10000, 60000};
    d.timeouts.collective_ms = pick(rng, collective_ms);
    d.timeouts.join_ms = d.timeouts.collective_ms / 2 + 1;
  }

  FaultPlan faults;
  const uint64_t fault_kind = rng.below(20);
  if (fault_kind >= 6 && fault_kind < 15) {
    // Mostly a step site the drawn config's placements reach (host_shared
    // the shm sites, device_peer the exchange sites, device_collective map
    // and access), so a sweep fires every site; process sites fire from
    // any config and from the other draws; sometimes any site. The lists
    // come from the site table.
    const uint8_t reach = sites_reached_by_plan(d);
    std::vector<FaultSite> aimed;
    for (const FaultSiteInfo& info : kFaultSites)
      if (info.kind == FaultKind::kStep && (info.reached_by & reach)) aimed.push_back(info.site);
    if (aimed.empty())
      for (const FaultSiteInfo& info : kFaultSites)
        if (info.kind == FaultKind::kProcess) aimed.push_back(info.site);
    FaultSite site = static_cast<FaultSite>(rng.below(kFaultSiteCount));
    if (rng.chance(0.75)) site = aimed[rng.below(aimed.size())];
    std::string at;
    uint64_t delay_us = 0;
    if (is_process_fault(site)) {
      // "" (any checkpoint), "collective" or a step site.
      std::vector<std::string_view> checkpoints = {"", kCollectiveCheckpoint};
      for (const FaultSiteInfo& info : kFaultSites)
        if (info.kind == FaultKind::kStep) checkpoints.push_back(info.name);
      at = std::string(checkpoints[rng.below(checkpoints.size())]);
    }
    if (site == FaultSite::kSlow) {
      // A stall well within the timeout, or one past it.
      const uint64_t timeout_us = d.timeouts.collective_ms * 1000;
      const uint64_t factors_percent[] = {10, 50, 150, 400};
      delay_us = timeout_us * pick(rng, factors_percent) / 100;
    }
    int rank = static_cast<int>(rng.below(static_cast<uint64_t>(world)));
    if ((site == FaultSite::kShmCreate || site == FaultSite::kShmWrite) && rng.chance(0.8)) {
      // Only a host's first rank creates its segments: aim there.
      const int host = static_cast<int>(rng.below(d.hosts.size()));
      if (d.rank_hosts.empty()) {
        rank = 0;
        for (int h = 0; h < host; ++h) rank += d.hosts[static_cast<size_t>(h)].gpu_count;
      } else {
        rank = static_cast<int>(std::find(d.rank_hosts.begin(), d.rank_hosts.end(), host) - d.rank_hosts.begin());
      }
    }
    faults.plan(site, rank, 1 + static_cast<int>(rng.below(2)), at, delay_us);
  } else if (fault_kind >= 15) {
    const double rates[] = {0.01, 0.05, 0.2};
    const int sites = 1 + static_cast<int>(rng.below(2));
    for (int i = 0; i < sites; ++i)
      faults.with_rate(static_cast<FaultSite>(rng.below(kFaultSiteCount)), pick(rng, rates));
    faults.slow_delay_us = d.timeouts.collective_ms * 1000 / 4;
  }

  SwarmCase c;
  c.job.deployment = std::move(d);
  c.job.seed = seed;
  c.job.faults = std::move(faults);
  c.job.lookup.tokens = static_cast<int>(rng.below(7));
  c.job.lookup.run = true;
  // Drawn last, so the draws above stay what they were for every seed.
  // Above TP1 the host layouts hold TP slices: sometimes sequence parallel,
  // sometimes a 7-head table whose last slice is padded.
  if (c.job.deployment.layout.tp > 1) {
    c.job.deployment.config.sequence_parallel = rng.chance(0.4);
    if (rng.chance(0.3)) c.job.lookup.model = "tiny-7h";
  }
  c.description = describe(c.job.deployment, c.job.faults, c.job.lookup);
  return c;
}

SwarmSeedResult run_swarm_seed(uint64_t seed, bool check_determinism) {
  SwarmCase c = draw_swarm_case(seed);
  SwarmSeedResult result;
  result.seed = seed;
  result.description = c.description;
  result.reproduction =
      fmt::format("engramlab fuzz --seed {} --seeds 1{}", seed, check_determinism ? " --check-determinism" : "");
  c.job.reproduction = result.reproduction;
  EmulatedOutcome out = run_emulated_job(c.job);
  result.outcome = outcome_of(out);
  result.trace_hash = out.world.trace_hash;
  result.faults = out.world.faults;
  result.coverage = out.world.coverage;
  check_invariants(c.job, out, result.violations);
  if (check_determinism && !out.emulator_refused) {
    EmulatedOutcome again = run_emulated_job(c.job);
    if (again.world.trace_hash != out.world.trace_hash)
      result.violations.push_back(fmt::format("not deterministic: trace hash {:016x} then {:016x}",
                                              out.world.trace_hash, again.world.trace_hash));
    if (rank_outcomes(again) != rank_outcomes(out))
      result.violations.push_back(fmt::format("not deterministic: rank outcomes differ: {} then {}",
                                              rank_outcomes(out), rank_outcomes(again)));
  }
  result.passed = result.violations.empty();
  return result;
}

std::vector<FaultSite> SwarmReport::sites_never_fired() const {
  std::vector<FaultSite> out;
  for (int s = 0; s < kFaultSiteCount; ++s)
    if (fired[static_cast<size_t>(s)] == 0) out.push_back(static_cast<FaultSite>(s));
  return out;
}

bool SwarmReport::passed() const {
  return failures.empty() && (seed_count < kEverySiteSweepSeeds || sites_never_fired().empty());
}

std::string SwarmReport::fault_site_table() const {
  std::string out = fmt::format("{:<12} {:>10} {:>8} {:>7}\n", "fault site", "reached", "fired", "seeds");
  for (int s = 0; s < kFaultSiteCount; ++s) {
    const size_t i = static_cast<size_t>(s);
    out += fmt::format("{:<12} {:>10} {:>8} {:>7}{}\n", fault_site_name(static_cast<FaultSite>(s)), reached[i],
                       fired[i], seeds_fired[i], fired[i] == 0 ? "   NEVER FIRED" : "");
  }
  return out;
}

std::string SwarmReport::coverage_table() const {
  std::string out = fmt::format("{:<56} {:>9} {:>7}\n", "coverage probe", "hits", "seeds");
  for (const auto& [probe, hs] : coverage) out += fmt::format("{:<56} {:>9} {:>7}\n", probe, hs.first, hs.second);
  if (coverage.empty()) out += "(no probe was hit)\n";
  return out;
}

std::string SwarmReport::outcome_table() const {
  std::vector<std::pair<int, std::string>> rows;
  for (const auto& [outcome, n] : outcomes) rows.push_back({n, outcome});
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::string out = fmt::format("{:<64} {:>7}\n", "outcome", "seeds");
  for (const auto& [n, outcome] : rows) out += fmt::format("{:<64} {:>7}\n", outcome, n);
  return out;
}

SwarmReport run_swarm(uint64_t first_seed, int seed_count, bool check_determinism,
                      const std::function<void(int done)>& on_seed_done) {
  ENGRAM_CHECK(seed_count >= 0);
  const auto started = std::chrono::steady_clock::now();
  SwarmReport report;
  report.first_seed = first_seed;
  report.seed_count = seed_count;
  report.check_determinism = check_determinism;
  for (int i = 0; i < seed_count; ++i) {
    SwarmSeedResult r = run_swarm_seed(first_seed + static_cast<uint64_t>(i), check_determinism);
    for (int s = 0; s < kFaultSiteCount; ++s) {
      const auto site = static_cast<FaultSite>(s);
      report.fired[static_cast<size_t>(s)] += r.faults.fired(site);
      report.reached[static_cast<size_t>(s)] += r.faults.reached(site);
      report.seeds_fired[static_cast<size_t>(s)] += r.faults.fired(site) > 0 ? 1 : 0;
    }
    for (const auto& [probe, hits] : r.coverage) {
      auto& entry = report.coverage[probe];
      entry.first += hits;
      entry.second += hits > 0 ? 1 : 0;
    }
    ++report.outcomes[r.outcome];
    if (!r.passed) report.failures.push_back(std::move(r));
    if (on_seed_done) on_seed_done(i + 1);
  }
  report.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return report;
}

}  // namespace engram::sim
