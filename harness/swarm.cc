#include "harness/swarm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>

#include "core/base/coverage_probe.h"
#include "core/base/rerun_command.h"
#include "core/base/units.h"
#include "core/base/warnings.h"
#include "core/plan/deployment_plan.h"
#include "core/deployment/deployment_validate.h"
#include "core/deployment/shard_groups.h"
#include "harness/scenario_check.h"
#include "sim/seed.h"

namespace engram::harness {
namespace {

template <typename T, size_t N>
const T& pick(sim::Rng& rng, const T (&options)[N]) {
  return options[rng.below(N)];
}

std::string shm_text(const HostSpec& h) {
  if (!h.shm_mounted) return "none";
  return format_bytes(h.tmpfs_bytes_total);
}

std::string describe(const Deployment& d, const sim::FaultPlan& faults, const ScenarioLookup& lookup) {
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
      "[{}]{} tp={} dp={}{}{}{} offload={} peer={} dp_shared_memory={} shard_group={}{} {}{} timeouts={}/{}ms "
      "faults: {}",
      hosts, rank_hosts, d.layout.tp, d.layout.dp,
      d.layout.prefill_cp > 1 ? fmt::format(" prefill_cp={}", d.layout.prefill_cp) : "",
      d.layout.elastic_ep ? " elastic_ep" : "",
      d.config.sequence_parallel ? " sequence_parallel" : "", d.config.cpu_offload,
      d.config.peer_shards,
      d.config.dp_shared_memory ? (*d.config.dp_shared_memory ? "true" : "false") : "unset",
      shard_group_name(d.config.shard_group),
      d.config.placement.empty() ? "" : " placement=" + d.config.placement,
      lookup.steps.drawn ? std::string("steps=drawn") : fmt::format("tokens={}", lookup.tokens),
      lookup.model == "tiny" ? "" : " model=" + lookup.model,
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
  std::vector<sim::LedgerEntry> leaks;
  for (const sim::LedgerEntry& e : out.world.leaks) {
    bool host_all_dead = false;
    if (e.kind == sim::ResourceKind::kShmSegment && e.rank >= 0 && static_cast<size_t>(e.rank) < n) {
      const int host = out.deployment.rank_hosts[static_cast<size_t>(e.rank)];
      host_all_dead = true;
      for (size_t r = 0; r < n; ++r)
        if (out.deployment.rank_hosts[r] == host && !out.world.died[r]) host_all_dead = false;
    }
    if (!host_all_dead) leaks.push_back(e);
  }
  if (!leaks.empty()) v.push_back("leaks after the run: " + sim::Ledger::format(leaks, 5));

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
    if (!out.ranks[r].ids_mismatch.empty())
      v.push_back(fmt::format("rank {}: ids differ from the accepted sequence hashed whole: {}", r,
                              out.ranks[r].ids_mismatch));
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

// The backend steps the deployment's planned placements run (PlacementSteps
// bits, from each placement's registration); a deployment the planner
// refuses runs none.
uint8_t steps_run_by_plan(const Deployment& d) {
  WarningSink quiet;
  Result<PlanResult> plan = plan_deployment(d, quiet);
  if (!plan.is_ok()) return kRunsNoBackendStep;
  uint8_t steps = kRunsNoBackendStep;
  for (const RankPlan& r : plan->ranks) steps |= placement_ops(r.placement).steps;
  return steps;
}

// Whether any group plan gives the deployment that shares device memory
// passes its handles as file descriptors (FABRIC handles travel as bytes in
// a collective: no fd is sent).
bool plan_passes_fds(const Deployment& d) {
  WarningSink quiet;
  Result<PlanResult> plan = plan_deployment(d, quiet);
  if (!plan.is_ok()) return false;
  for (const PlacementGroupSummary& g : plan->groups)
    if (placement_ops(g.placement).shares_device_memory && g.handle_type != HandleType::kFabric) return true;
  return false;
}

// Sites of `wanted` (every site when empty) that deployment `d` can fire:
// process sites always, step sites its placements reach.
std::vector<sim::FaultSite> aimable_sites(const std::vector<sim::FaultSite>& wanted, const Deployment& d) {
  const uint8_t reach = steps_run_by_plan(d);
  const bool fds = (reach & kExportsDeviceMemory) && plan_passes_fds(d);
  std::vector<sim::FaultSite> out;
  for (const sim::FaultSiteInfo& info : sim::kFaultSites) {
    const bool asked = wanted.empty() || std::find(wanted.begin(), wanted.end(), info.site) != wanted.end();
    const bool reached = info.kind == sim::FaultKind::kProcess || ((info.reached_by & reach) && (info.site != sim::FaultSite::kSend || fds));
    if (asked && reached) out.push_back(info.site);
  }
  return out;
}

// The index of host `host`'s first rank (only it creates the host's segments).
int first_rank_of_host(const Deployment& completed, int host) {
  const auto& hosts = completed.rank_hosts;
  return static_cast<int>(std::find(hosts.begin(), hosts.end(), host) - hosts.begin());
}

// Faults for a fixed deployment (completed: rank_hosts filled), aimed at
// `aim` (non-empty): mostly one planned fault at a drawn site, rank and
// occurrence (process faults at a checkpoint the deployment passes),
// sometimes two, sometimes rates, sometimes none.
sim::FaultPlan draw_aimed_faults(sim::Rng& rng, const Deployment& completed, const std::vector<sim::FaultSite>& aim, uint8_t reach) {
  sim::FaultPlan faults;
  const int world = static_cast<int>(completed.rank_hosts.size());
  const uint64_t kind = rng.below(20);
  if (kind < 2 || world == 0) return faults;  // none: the deployment as it is, under a drawn interleaving
  if (kind < 4) {
    const double rates[] = {0.01, 0.05, 0.2};
    const int sites = 1 + static_cast<int>(rng.below(2));
    for (int i = 0; i < sites; ++i) faults.with_rate(aim[rng.below(aim.size())], pick(rng, rates));
    faults.slow_delay_us = completed.timeouts.collective_ms * 1000 / 4;
    return faults;
  }
  std::vector<std::string_view> checkpoints = {"", sim::kCollectiveCheckpoint};
  for (const sim::FaultSiteInfo& info : sim::kFaultSites)
    if (info.kind == sim::FaultKind::kStep && (info.reached_by & reach)) checkpoints.push_back(info.name);
  const int count = rng.chance(0.2) ? 2 : 1;
  for (int i = 0; i < count; ++i) {
    const sim::FaultSite site = aim[rng.below(aim.size())];
    std::string at;
    uint64_t delay_us = 0;
    if (sim::is_process_fault(site)) at = std::string(checkpoints[rng.below(checkpoints.size())]);
    if (site == sim::FaultSite::kSlow) {
      const uint64_t factors_percent[] = {10, 50, 150, 400};
      delay_us = completed.timeouts.collective_ms * 1000 * pick(rng, factors_percent) / 100;
    }
    int rank = static_cast<int>(rng.below(static_cast<uint64_t>(world)));
    if (site == sim::FaultSite::kShmCreate || site == sim::FaultSite::kShmWrite)
      rank = first_rank_of_host(completed, static_cast<int>(rng.below(completed.hosts.size())));
    faults.plan(site, rank, 1 + static_cast<int>(rng.below(2)), at, delay_us);
  }
  return faults;
}

// Mostly the defaults, sometimes short ones (so a slow fault below the
// default outlasts them).
void draw_timeouts(sim::Rng& rng, Timeouts& timeouts) {
  if (!rng.chance(0.25)) return;
  const uint64_t collective_ms[] = {2000, 10000, 60000};
  timeouts.collective_ms = pick(rng, collective_ms);
  timeouts.join_ms = timeouts.collective_ms / 2 + 1;
}

// One line for a target's case: the file, not its (maybe 288) hosts.
std::string describe_target(const SwarmTarget& target, const Deployment& d, const sim::FaultPlan& faults,
                            const ScenarioLookup& lookup) {
  return fmt::format("{} tp={} dp={} tokens={} timeouts={}/{}ms faults: {}", target.file, d.layout.tp, d.layout.dp,
                     lookup.tokens, d.timeouts.collective_ms, d.timeouts.join_ms, faults.to_string());
}

// `fuzz --file`: the deployment fixed, the seed drawing timeouts (where the
// file sets none), faults and the lookup's token count (where the file has
// no lookup); the interleaving follows from the seed as always.
SwarmCase draw_target_case(uint64_t seed, const SwarmTarget& target) {
  sim::Rng rng(sim::sub_seed(seed, "swarm-target"));
  Deployment d = *target.deployment;
  if (!target.timeouts_written) draw_timeouts(rng, d.timeouts);
  SwarmCase c;
  c.job.seed = seed;
  c.job.lookup.run = true;
  c.job.lookup.tokens = 1 + static_cast<int>(rng.below(4));
  if (target.lookup) c.job.lookup = *target.lookup;
  if (auto completed = validate_and_complete(d); completed.is_ok()) {
    const std::vector<sim::FaultSite> aim = aimable_sites(target.sites, d);
    if (!aim.empty()) c.job.faults = draw_aimed_faults(rng, completed.value(), aim, steps_run_by_plan(d));
  }
  c.job.deployment = std::move(d);
  c.description = describe_target(target, c.job.deployment, c.job.faults, c.job.lookup);
  return c;
}

// The steps of a free draw, in the order they take their draws from the
// one generator (reordering them would change every seed's case).

// A small rack: trays of 4 GPUs in one NVLink domain with IMEX (sometimes one tray lacks it).
std::vector<HostSpec> draw_rack_trays(sim::Rng& rng) {
  std::vector<HostSpec> hosts;
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
    hosts.push_back(h);
  }
  if (rng.chance(0.2)) hosts[rng.below(hosts.size())].imex_channel = false;
  return hosts;
}

// Small worlds mostly (at most 16 ranks): a sweep of 2,000 seeds stays well under a minute.
std::vector<HostSpec> draw_small_hosts(sim::Rng& rng) {
  const char* gpu_models[] = {"H100", "H200", "B200", "GB200", "B300", "GB300"};
  const uint64_t shm_sizes[] = {190 * kGiB, 64 * kMiB, 0 /* missing */, 512 * kGiB, 100 * kGiB, 256 * kGiB};
  std::vector<HostSpec> hosts;
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
    hosts.push_back(h);
  }
  return hosts;
}

// TP, DP, elastic EP and sometimes an interleaved rank-to-host order.
void draw_layout(sim::Rng& rng, int world, Deployment& d) {
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
}

void draw_engram_config(sim::Rng& rng, EngramConfig& config) {
  config.cpu_offload = rng.chance(0.55);
  config.peer_shards = rng.chance(0.35);
  const uint64_t tri = rng.below(5);
  if (tri == 3) config.dp_shared_memory = true;
  if (tri == 4) config.dp_shared_memory = false;
  const ShardGroup groups[] = {ShardGroup::kWorld, ShardGroup::kWorld, ShardGroup::kNvlinkDomain, ShardGroup::kHost};
  config.shard_group = pick(rng, groups);
  // A fifth of the device-table configs whose dp_shared_memory stays unset
  // name vLLM's layout, which the rules never pick: from the draws above,
  // so every later draw of a seed stays what it was.
  if (!config.cpu_offload && !config.peer_shards && tri == 0) config.placement = "device_head_sharded";
}

// Mostly a step site the drawn config's placements reach (the steps each
// placement's registration says its build runs), so a sweep fires every
// site; process sites fire from any config and from the other draws;
// sometimes any site. The lists come from the site table.
std::vector<sim::FaultSite> sites_to_aim_at(const Deployment& d) {
  const uint8_t reach = steps_run_by_plan(d);
  std::vector<sim::FaultSite> aimed;
  for (const sim::FaultSiteInfo& info : sim::kFaultSites)
    if (info.kind == sim::FaultKind::kStep && (info.reached_by & reach)) aimed.push_back(info.site);
  if (aimed.empty())
    for (const sim::FaultSiteInfo& info : sim::kFaultSites)
      if (info.kind == sim::FaultKind::kProcess) aimed.push_back(info.site);
  return aimed;
}

// A process fault's checkpoint: "" (any checkpoint), "collective" or a step site.
std::string draw_checkpoint(sim::Rng& rng) {
  std::vector<std::string_view> checkpoints = {"", sim::kCollectiveCheckpoint};
  for (const sim::FaultSiteInfo& info : sim::kFaultSites)
    if (info.kind == sim::FaultKind::kStep) checkpoints.push_back(info.name);
  return std::string(checkpoints[rng.below(checkpoints.size())]);
}

// The struck rank; the shm sites mostly at a host's first rank, the only
// one that creates its segments.
int draw_fault_rank(sim::Rng& rng, const Deployment& d, int world, sim::FaultSite site) {
  int rank = static_cast<int>(rng.below(static_cast<uint64_t>(world)));
  if ((site == sim::FaultSite::kShmCreate || site == sim::FaultSite::kShmWrite) && rng.chance(0.8)) {
    const int host = static_cast<int>(rng.below(d.hosts.size()));
    if (d.rank_hosts.empty()) {
      rank = 0;
      for (int h = 0; h < host; ++h) rank += d.hosts[static_cast<size_t>(h)].gpu_count;
    } else {
      rank = static_cast<int>(std::find(d.rank_hosts.begin(), d.rank_hosts.end(), host) - d.rank_hosts.begin());
    }
  }
  return rank;
}

sim::FaultPlan draw_planned_fault(sim::Rng& rng, const Deployment& d, int world) {
  const std::vector<sim::FaultSite> aimed = sites_to_aim_at(d);
  sim::FaultSite site = static_cast<sim::FaultSite>(rng.below(sim::kFaultSiteCount));
  if (rng.chance(0.75)) site = aimed[rng.below(aimed.size())];
  std::string at;
  uint64_t delay_us = 0;
  if (sim::is_process_fault(site)) at = draw_checkpoint(rng);
  if (site == sim::FaultSite::kSlow) {
    // A stall well within the timeout, or one past it.
    const uint64_t timeout_us = d.timeouts.collective_ms * 1000;
    const uint64_t factors_percent[] = {10, 50, 150, 400};
    delay_us = timeout_us * pick(rng, factors_percent) / 100;
  }
  const int rank = draw_fault_rank(rng, d, world, site);
  sim::FaultPlan faults;
  faults.plan(site, rank, 1 + static_cast<int>(rng.below(2)), at, delay_us);
  return faults;
}

sim::FaultPlan draw_fault_rates(sim::Rng& rng, const Timeouts& timeouts) {
  sim::FaultPlan faults;
  const double rates[] = {0.01, 0.05, 0.2};
  const int sites = 1 + static_cast<int>(rng.below(2));
  for (int i = 0; i < sites; ++i)
    faults.with_rate(static_cast<sim::FaultSite>(rng.below(sim::kFaultSiteCount)), pick(rng, rates));
  faults.slow_delay_us = timeouts.collective_ms * 1000 / 4;
  return faults;
}

// After the lookup's own draws: sometimes context-parallel prefill (a
// prefill_cp dividing dp: each batch one sequence per CP group, hashed after
// the halos), and sometimes a step schedule drawn from the job's seed
// (`steps: drawn`: chunks, decode, cached prefixes, handovers between the
// replicas, ragged verify blocks, idle slots and padding through a request
// hasher per rank). Either way each rank's ids are checked against the
// accepted sequence hashed whole.
void draw_hashing(sim::Rng& rng, EmulatedJob& job) {
  ParallelLayout& layout = job.deployment.layout;
  if (rng.chance(0.25)) {
    std::vector<int> divisors;
    for (int cp = 2; cp <= std::min(layout.dp, 8); ++cp)
      if (layout.dp % cp == 0) divisors.push_back(cp);
    if (!divisors.empty()) layout.prefill_cp = divisors[rng.below(divisors.size())];
  }
  if (rng.chance(0.3)) {
    job.lookup.steps.drawn = true;
    job.lookup.tokens = 0;  // the steps bring their own
  }
}

// Drawn last, so the draws before stay what they were for every seed.
// Above TP1 the host layouts hold TP slices: sometimes sequence parallel,
// sometimes a 7-head table whose last slice is padded.
void draw_lookup(sim::Rng& rng, EmulatedJob& job) {
  job.lookup.tokens = static_cast<int>(rng.below(7));
  job.lookup.run = true;
  if (job.deployment.layout.tp > 1) {
    job.deployment.config.sequence_parallel = rng.chance(0.4);
    if (rng.chance(0.3)) job.lookup.model = "tiny-7h";
  }
  draw_hashing(rng, job);
}

SwarmCase draw_free_case(uint64_t seed) {
  sim::Rng rng(sim::sub_seed(seed, "swarm"));
  Deployment d;
  d.model = "deepseek-v4.1-flash";
  d.hosts = rng.chance(0.03) ? draw_rack_trays(rng) : draw_small_hosts(rng);
  int world = 0;
  for (const HostSpec& h : d.hosts) world += h.gpu_count;
  draw_layout(rng, world, d);
  draw_engram_config(rng, d.config);
  draw_timeouts(rng, d.timeouts);

  // Mostly one planned fault, sometimes rates, else none.
  sim::FaultPlan faults;
  const uint64_t fault_kind = rng.below(20);
  if (fault_kind >= 6 && fault_kind < 15) faults = draw_planned_fault(rng, d, world);
  else if (fault_kind >= 15) faults = draw_fault_rates(rng, d.timeouts);

  SwarmCase c;
  c.job.deployment = std::move(d);
  c.job.seed = seed;
  c.job.faults = std::move(faults);
  draw_lookup(rng, c.job);
  c.description = describe(c.job.deployment, c.job.faults, c.job.lookup);
  return c;
}

}  // namespace

SwarmCase draw_swarm_case(uint64_t seed, const SwarmTarget& target) {
  if (target.deployment) return draw_target_case(seed, target);
  SwarmCase c = draw_free_case(seed);
  if (target.sites.empty()) return c;
  // --sites without a file: the drawn topology, its faults redrawn at those
  // sites (from a sub-seed of their own, so the topology stays the seed's).
  sim::Rng rng(sim::sub_seed(seed, "swarm-sites"));
  const Deployment& d = c.job.deployment;
  c.job.faults = {};
  if (auto completed = validate_and_complete(d); completed.is_ok()) {
    std::vector<sim::FaultSite> aim = aimable_sites(target.sites, d);
    if (aim.empty()) aim = target.sites;  // still try them: the runtime may reach what plan does not
    c.job.faults = draw_aimed_faults(rng, completed.value(), aim, steps_run_by_plan(d));
  }
  c.description = describe(c.job.deployment, c.job.faults, c.job.lookup);
  return c;
}

std::vector<sim::FaultSite> swarm_sites_expected(const SwarmTarget& target) {
  if (!target.deployment) {
    if (!target.sites.empty()) return target.sites;
    std::vector<sim::FaultSite> all;
    for (const sim::FaultSiteInfo& info : sim::kFaultSites) all.push_back(info.site);
    return all;
  }
  return aimable_sites(target.sites, *target.deployment);
}

std::vector<std::string> swarm_rerun_args(uint64_t seed, bool check_determinism, const SwarmTarget& target) {
  std::vector<std::string> rerun = {"fuzz"};
  if (!target.file.empty()) rerun.insert(rerun.end(), {"--file", target.file});
  rerun.insert(rerun.end(), {"--seed", std::to_string(seed), "--seeds", "1"});
  if (!target.sites.empty()) {
    std::string names;
    for (sim::FaultSite site : target.sites) names += fmt::format("{}{}", names.empty() ? "" : ",", sim::fault_site_name(site));
    rerun.insert(rerun.end(), {"--sites", names});
  }
  if (!target.engine.empty()) rerun.insert(rerun.end(), {"--engine", target.engine});
  if (!target.host_layout.empty()) rerun.insert(rerun.end(), {"--host-layout", target.host_layout});
  if (!target.without.empty()) rerun.insert(rerun.end(), {"--without", fmt::format("{}", fmt::join(target.without, ","))});
  if (check_determinism) rerun.push_back("--check-determinism");
  return rerun;
}

SwarmSeedResult run_swarm_seed(uint64_t seed, bool check_determinism, const SwarmTarget& target) {
  SwarmCase c = draw_swarm_case(seed, target);
  SwarmSeedResult result;
  result.seed = seed;
  result.description = c.description;
  const std::vector<std::string> rerun = swarm_rerun_args(seed, check_determinism, target);
  result.reproduction = rerun_command(rerun);
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

std::vector<sim::FaultSite> SwarmReport::sites_never_fired() const {
  std::vector<sim::FaultSite> out;
  for (sim::FaultSite site : expected_sites)
    if (fired[static_cast<size_t>(site)] == 0) out.push_back(site);
  return out;
}

std::vector<std::string> SwarmReport::probes_never_hit() const {
  std::vector<std::string> out;
  for (std::string_view probe : registered_coverage_probes())
    if (!coverage.contains(probe)) out.emplace_back(probe);
  return out;
}

bool SwarmReport::passed() const {
  return failures.empty() && (seed_count < kEverySiteSweepSeeds || sites_never_fired().empty());
}

std::string SwarmReport::fault_site_table() const {
  std::string out = fmt::format("{:<12} {:>10} {:>8} {:>7}\n", "fault site", "reached", "fired", "seeds");
  for (int s = 0; s < sim::kFaultSiteCount; ++s) {
    const size_t i = static_cast<size_t>(s);
    const bool expected = std::find(expected_sites.begin(), expected_sites.end(), static_cast<sim::FaultSite>(s)) !=
                          expected_sites.end();
    out += fmt::format("{:<12} {:>10} {:>8} {:>7}{}\n", sim::fault_site_name(static_cast<sim::FaultSite>(s)), reached[i],
                       fired[i], seeds_fired[i],
                       fired[i] != 0 ? "" : expected ? "   NEVER FIRED" : "   (not aimed at)");
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
                      const std::function<void(int done)>& on_seed_done, const SwarmTarget& target) {
  ENGRAM_CHECK(seed_count >= 0);
  const auto started = std::chrono::steady_clock::now();
  SwarmReport report;
  report.first_seed = first_seed;
  report.seed_count = seed_count;
  report.check_determinism = check_determinism;
  report.expected_sites = swarm_sites_expected(target);
  for (int i = 0; i < seed_count; ++i) {
    SwarmSeedResult r = run_swarm_seed(first_seed + static_cast<uint64_t>(i), check_determinism, target);
    for (int s = 0; s < sim::kFaultSiteCount; ++s) {
      const auto site = static_cast<sim::FaultSite>(s);
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

}  // namespace engram::harness
