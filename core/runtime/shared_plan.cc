#include "core/runtime/shared_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "core/exchange/gather_facts.h"
#include "core/plan/memory_fit.h"
#include "core/runtime/engram_runtime.h"
#include "core/runtime/plan_inputs.h"

namespace engram {
namespace {

// The runtime's own part of each rank's start facts (core/exchange/gather_facts
// carries hostname, boot id, NVLink domain and IMEX around it). Explicit
// padding: every byte sent is set, so the same facts travel as the same bytes.
struct RuntimeWireFacts {
  static constexpr uint64_t kNotEnforced = ~uint64_t{0};
  uint64_t tmpfs_bytes_total = 0;
  uint64_t gpu_memory_bytes = 0;
  uint8_t shm_mounted = 0;
  uint8_t fabric_attribute = 0;
  uint8_t has_device = 0;
  uint8_t environment = 0;  // RuntimeEnvironment: picks the fixes warnings name
  uint8_t pad[4] = {};
  uint64_t gpu_bus_key = 0;  // the GPU's PCI bus id hashed (0: no device): ranks of a host on one GPU share it
  // What the memory fit judges (core/backend/host_probe.h MemoryFacts).
  uint64_t host_memory_bytes = 0;
  uint64_t tmpfs_bytes_enforced = kNotEnforced;
  MemoryLimitFact limits[2] = {};
};
static_assert(sizeof(RuntimeWireFacts) == 80);

SharedPlan derive(Result<PlanResult> plan) {
  SharedPlan out;
  out.plan = std::move(plan);
  if (!out.plan.is_ok()) return out;
  const PlanResult& p = out.plan.value();
  out.host_writer_world_rank.assign(p.deployment.hosts.size(), -1);
  for (const RankPlan& rp : p.ranks) {
    int& writer = out.host_writer_world_rank[static_cast<size_t>(rp.host)];
    if (writer < 0) writer = rp.rank;
  }
  out.group_of_rank.assign(p.ranks.size(), -1);
  for (size_t g = 0; g < p.groups.size(); ++g)
    for (int r : p.groups[g].ranks) out.group_of_rank[static_cast<size_t>(r)] = static_cast<int>(g);
  return out;
}

// The plans made from one GatheredFacts, by their inputs: every rank of a
// job passes the same inputs, so one entry in practice; a rank that passed
// others gets a plan of its own. Kept in GatheredFacts::derived, so it lives
// exactly as long as the facts the ranks share.
class PlansOfFacts {
 public:
  template <typename Make>
  std::shared_ptr<const SharedPlan> get_or_make(PlanInputs inputs, Make&& make) {
    const size_t inputs_hash = PlanInputsHash{}(inputs);
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Entry& e : made_)
      if (e.inputs_hash == inputs_hash && e.inputs == inputs) return e.plan;
    std::shared_ptr<const SharedPlan> plan = std::forward<Make>(make)(inputs);
    made_.push_back({std::move(inputs), inputs_hash, plan});
    return plan;
  }

 private:
  struct Entry {
    PlanInputs inputs;
    size_t inputs_hash = 0;
    std::shared_ptr<const SharedPlan> plan;
  };
  std::mutex mutex_;
  std::vector<Entry> made_;
};

// The same decision `plan` makes, from the gathered facts and `inputs`.
std::shared_ptr<const SharedPlan> decide(const PlanInputs& inputs, const GatheredFacts& facts) {
  // Hosts by identity (hostname + boot id) in rank order.
  Deployment deployment;
  // From the key itself, so what is planned is exactly what is kept.
  deployment.model = inputs.placement_model;
  deployment.layout = inputs.layout;
  deployment.config = inputs.config;
  deployment.engine = inputs.engine;
  std::map<std::pair<std::string, std::string>, int> host_index;
  std::map<std::pair<int, uint64_t>, int> ranks_on_gpu;  // (host, GPU bus key) -> ranks
  std::map<std::pair<int, uint64_t>, MemoryLimitScope> limits;  // (host, limit key) -> the ranks under it
  for (const RankFacts& rank_facts : facts.ranks) {
    const PlacementFacts& p = rank_facts.placement;
    const RuntimeWireFacts f = rank_facts.extra_as<RuntimeWireFacts>();
    auto key_of_host = std::make_pair(p.host.hostname, p.host.boot_id);
    auto [it, inserted] = host_index.emplace(key_of_host, static_cast<int>(deployment.hosts.size()));
    if (inserted) {
      HostSpec host;
      host.name = key_of_host.first;
      host.boot_id = key_of_host.second;
      host.nvlink_domain = p.nvlink_domain;
      host.imex_channel = p.imex_channel;
      host.fabric_attribute = f.fabric_attribute;
      host.shm_mounted = f.shm_mounted;
      host.tmpfs_bytes_total = f.tmpfs_bytes_total;
      host.gpu_memory_bytes = f.gpu_memory_bytes;
      host.environment = static_cast<RuntimeEnvironment>(std::min<uint8_t>(f.environment, 3));
      deployment.hosts.push_back(std::move(host));
    }
    HostSpec& host = deployment.hosts[static_cast<size_t>(it->second)];
    // A host's RAM and enforced /dev/shm limit, as its ranks read them (the least, should they differ).
    if (f.host_memory_bytes != 0 && (host.host_memory_bytes == 0 || f.host_memory_bytes < host.host_memory_bytes))
      host.host_memory_bytes = f.host_memory_bytes;
    if (f.tmpfs_bytes_enforced != RuntimeWireFacts::kNotEnforced)
      host.tmpfs_bytes_enforced = std::min(host.tmpfs_bytes_enforced.value_or(f.tmpfs_bytes_enforced), f.tmpfs_bytes_enforced);
    const int rank = static_cast<int>(deployment.rank_hosts.size());
    for (const MemoryLimitFact& limit : f.limits) {
      if (limit.key == 0) continue;
      MemoryLimitScope& scope = limits[{it->second, limit.key}];
      scope.host = it->second;
      scope.limit_bytes = scope.ranks.empty() ? limit.limit_bytes : std::min(scope.limit_bytes, limit.limit_bytes);
      scope.ranks.push_back(rank);
    }
    ++host.gpu_count;
    deployment.rank_hosts.push_back(it->second);
    if (f.has_device != 0 && f.gpu_bus_key != 0) ++ranks_on_gpu[{it->second, f.gpu_bus_key}];
  }
  // Ranks a host runs on one GPU (opened so only when told, e.g.
  // --ranks-per-gpu): the plan then refuses what needs a GPU per rank.
  for (const auto& [where, ranks] : ranks_on_gpu) {
    HostSpec& host = deployment.hosts[static_cast<size_t>(where.first)];
    host.ranks_per_gpu = std::max(host.ranks_per_gpu, ranks);
  }
  for (HostSpec& host : deployment.hosts) {
    const int ranks = host.gpu_count;  // counted one per rank above
    host.gpu_count = (ranks + host.ranks_per_gpu - 1) / host.ranks_per_gpu;
  }
  WarningSink plan_sink;  // plan's warnings reach the caller's sink from the result, once
  // The limits the ranks run under, as they found them (plan takes them
  // from the deployment's fields), judged by the fit `plan` and scenarios judge.
  std::vector<MemoryLimitScope> found;
  for (auto& [where, scope] : limits) found.push_back(std::move(scope));
  return std::make_shared<const SharedPlan>(derive(plan_that_fits(deployment, plan_sink, &found)));
}

// Made by the first rank that asks, from these facts and these inputs, and
// handed to every rank that shares the facts (the emulator's ranks).
std::shared_ptr<const SharedPlan> plan_once(const RuntimeOptions& options, const GatheredFacts& facts) {
  const auto plans = facts.derived.get_or_make<PlansOfFacts>([] { return std::make_shared<PlansOfFacts>(); });
  return plans->get_or_make(PlanInputs::of(options),
                            [&](const PlanInputs& inputs) { return decide(inputs, facts); });
}

// This rank's facts for the others: /dev/shm and the device.
RuntimeWireFacts local_wire_facts(RankBackend& backend) {
  RuntimeWireFacts mine;
  auto shm = backend.shm->info();
  if (shm.is_ok()) {
    mine.shm_mounted = shm->mounted;
    // The total, never the free space: every rank of a node decides alike.
    mine.tmpfs_bytes_total = shm->tmpfs_bytes_total;
  }
  const MemoryFacts memory = backend.probe->memory();
  mine.host_memory_bytes = memory.host_memory_bytes;
  if (memory.tmpfs_bytes_enforced) mine.tmpfs_bytes_enforced = *memory.tmpfs_bytes_enforced;
  for (size_t i = 0; i < memory.limits.size(); ++i) mine.limits[i] = memory.limits[i];
  if (backend.device != nullptr) {
    auto info = backend.device->info();
    if (info.is_ok()) {
      mine.has_device = 1;
      mine.fabric_attribute = info->fabric_attribute;
      mine.gpu_memory_bytes = info->memory_bytes_total;
      mine.gpu_bus_key = info->bus_id.empty() ? 0 : (std::hash<std::string>{}(info->bus_id) | 1);
    }
  }
  return mine;
}

}  // namespace

// Facts from every rank before deciding anything, then the decision `plan`
// makes from them.
Result<std::shared_ptr<const SharedPlan>> gather_and_decide(RankBackend& backend, const RuntimeOptions& options) {
  Collectives& world = *backend.world;
  const int me = world.world_rank();
  const PlacementFacts placement = backend.probe->facts();
  RuntimeWireFacts mine = local_wire_facts(backend);
  mine.environment = static_cast<uint8_t>(placement.environment);
  auto all = gather_facts(world, placement, mine);
  if (!all.is_ok()) return std::move(all).take_status().with_context(me, -1, "gather facts");
  std::shared_ptr<const SharedPlan> shared = plan_once(options, *all.value());
  if (!shared->plan.is_ok()) return Status(shared->plan.status()).with_context(me, -1, "decide placement");
  return shared;
}

}  // namespace engram
