#include "core/plan/memory_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <span>
#include <set>
#include <tuple>
#include <vector>

#include "core/base/size_text.h"
#include "core/base/text_list.h"
#include "core/base/units.h"
#include "core/plan/memory_margins.h"
#include "core/plan/shm_fix.h"

namespace engram {
namespace {

std::string signed_size(int64_t bytes) {
  return bytes < 0 ? "-" + format_size_short(static_cast<uint64_t>(-bytes)) : format_size_short(static_cast<uint64_t>(bytes));
}

// What to change when a host's tables exceed its RAM, by the placements its
// ranks took.
std::string host_fix(const std::set<Placement>& placements) {
  std::vector<std::string> fixes;
  for (Placement p : placements)
    if (const char* fix = placement_ops(p).host_memory_fix) fixes.push_back(fix);
  fixes.push_back("put fewer ranks on each host, give the host's real RAM with host_memory (--host-memory), or keep "
                  "the tables on the GPUs (cpu_offload: false)");
  std::string out;
  for (size_t i = 0; i < fixes.size(); ++i) out += (i ? "; " : "") + fixes[i];
  return out;
}

// Whole GiB rounded up: a size every tool reads (docker's g, Kubernetes'
// Gi, systemd's G, our GiB) as at least `bytes`.
uint64_t whole_gib_up(uint64_t bytes) { return (bytes + kGiB - 1) / kGiB; }

std::string placement_names(const std::set<Placement>& placements) {
  std::string out;
  for (Placement p : placements) out += (out.empty() ? "" : ", ") + std::string(placement_name(p));
  return out;
}

// The deployment's /dev/shm copies beyond what a tmpfs enforces below the
// total it shows (a Kubernetes emptyDir sizeLimit): the pod is evicted at the fill.
void check_shm_enforced(const PlanResult& plan, std::vector<std::string>& problems) {
  using Key = std::tuple<uint64_t, uint64_t, uint64_t>;  // copy, enforced, total
  std::map<Key, std::vector<std::string>> over;
  for (const HostMemory& h : plan.hosts) {
    const HostSpec& host = plan.deployment.hosts[static_cast<size_t>(h.host)];
    if (h.shm_bytes == 0 || !host.tmpfs_bytes_enforced || h.shm_bytes <= *host.tmpfs_bytes_enforced) continue;
    over[{h.shm_bytes, *host.tmpfs_bytes_enforced, host.tmpfs_bytes_total}].push_back(h.name);
  }
  for (const auto& [key, names] : over) {
    const auto& [copy, enforced, total] = key;
    const uint64_t gib = whole_gib_up(copy + kShmHeadroomFloorBytesPerNode);  // the copy plus what else lives there
    problems.push_back(fmt::format(
        "host(s) {} (host_shared): the node's /dev/shm copy takes {}, more than the {} its tmpfs lets be written "
        "below the {} total it shows (a Kubernetes emptyDir sizeLimit), so the pod would be evicted while the copy is "
        "written; set the emptyDir's sizeLimit: {}Gi (shm_size_limit: {}Gi in the deployment, --shm-size-limit {}Gi) "
        "with a pod memory limit that covers it, or dp_shared_memory: false",
        join_names(names), format_size_short(copy), format_size_short(enforced), format_size_short(total), gib, gib,
        gib));
  }
}

// How to raise a memory limit to `bytes`, for the environments that apply.
// Sized as what is charged plus the headroom the engine's processes need.
std::string memory_limit_fix(uint64_t charged, uint64_t headroom, bool per_rank, EnvironmentSet environments) {
  const uint64_t gib = whole_gib_up(charged + headroom);
  auto applies = [&environments](RuntimeEnvironment which) { return environments.applies(which); };
  std::string out = fmt::format("{}GiB (the {} charged + {} headroom for the engine's processes): ", gib,
                                format_size_short(charged), format_size_short(headroom));
  out += per_rank ? fmt::format("memory_limit_per_rank: {}GiB in the deployment (--memory-limit-per-rank "
                                "{}GiB)", gib, gib)
                  : fmt::format("memory_limit: {}GiB in the deployment (--memory-limit {}GiB)", gib, gib);
  if (applies(RuntimeEnvironment::kDocker)) out += fmt::format("; Docker: docker run --memory={}g", gib);
  if (applies(RuntimeEnvironment::kKubernetes))
    out += fmt::format("; Kubernetes: resources.limits.memory: {}Gi{}", gib,
                       per_rank ? "" : " over the pod's containers");
  if (applies(RuntimeEnvironment::kBareMetal))
    out += fmt::format("; bare metal: the cgroup's memory.max (systemd MemoryMax={}G)", gib);
  return out;
}

// Memory limits below what their ranks will hold in their own memory: their
// host tables, the /dev/shm pages they write (charged to the writer's
// cgroup), their pinned lookup staging. The kernel OOM-kills such a rank
// while it fills its tables. Limits alike (the same limit, ranks per limit
// and placements) in one sentence, with the largest charge among them (TP
// slices differ by a few rows).
void check_memory_limits(const PlanResult& plan, std::vector<std::string>& problems) {
  struct Charge {
    uint64_t host_tables = 0, shm_written = 0, pinned = 0;
    uint64_t total() const { return host_tables + shm_written + pinned; }
  };
  using Key = std::tuple<uint64_t, size_t, std::set<Placement>>;  // limit, ranks per limit, placements
  struct Over {
    std::vector<int> ranks;
    std::set<std::string> hosts;  // a set: a limit per rank over a thousand hosts stays linear
    size_t scopes = 0;
    Charge largest;
    EnvironmentSet environments;
    bool per_rank_field = false;  // the limit is memory_limit_per_rank (one rank under a host's memory_limit is not)
  };
  std::map<Key, Over> over;
  for (const MemoryLimitScope& scope : plan.memory_limits) {
    Charge charge;
    std::set<Placement> placements;
    for (int r : scope.ranks) {
      const RankPlan& rp = plan.ranks[static_cast<size_t>(r)];
      charge.host_tables += rp.memory.host_private_bytes;
      charge.shm_written += rp.memory.shm_written_bytes;
      charge.pinned += rp.memory.host_pinned_bytes;
      placements.insert(rp.placement);
    }
    ENGRAM_CHECK(charge.total() >= charge.host_tables);  // no sum wrapped (sizes are capped at 1 EiB)
    if (charge.total() <= scope.limit_bytes) continue;
    Over& o = over[{scope.limit_bytes, scope.ranks.size(), placements}];
    const HostSpec& host = plan.deployment.hosts[static_cast<size_t>(scope.host)];
    o.environments.add(host.environment);
    // One rank under its own limit: memory_limit_per_rank, unless the host's entry says it is the host's
    // memory_limit (a container of one rank; the runtime's cgroups cannot tell the two apart).
    const bool host_limit = host.memory_limit_bytes && *host.memory_limit_bytes == scope.limit_bytes &&
                            !(host.memory_limit_bytes_per_rank && *host.memory_limit_bytes_per_rank == scope.limit_bytes);
    o.per_rank_field = scope.ranks.size() == 1 && !host_limit;
    ++o.scopes;
    if (charge.total() > o.largest.total()) o.largest = charge;
    o.ranks.insert(o.ranks.end(), scope.ranks.begin(), scope.ranks.end());
    o.hosts.insert(host.name);
  }
  for (auto& [key, o] : over) {
    const auto& [limit, ranks_per_scope, placements] = key;
    const Charge& charge = o.largest;
    std::sort(o.ranks.begin(), o.ranks.end());
    const std::vector<std::string> hosts(o.hosts.begin(), o.hosts.end());
    std::string parts;
    if (charge.host_tables) parts = fmt::format("host tables {}", format_size_short(charge.host_tables));
    if (charge.shm_written)
      parts += fmt::format("{}the node's /dev/shm copy it writes {}, its pages charged to the writer",
                           parts.empty() ? "" : ", ", format_size_short(charge.shm_written));
    if (charge.pinned)
      parts += fmt::format("{}pinned lookup staging {}", parts.empty() ? "" : ", ", format_size_short(charge.pinned));
    const bool one_rank = ranks_per_scope == 1;
    const std::string up_to = o.scopes == 1 ? "" : "up to ";
    std::string who;
    if (one_rank && o.scopes == 1)
      who = fmt::format("rank {} on host {} ({}) runs under a memory limit of {}, below the {} it will hold in its "
                        "own memory ({})",
                        o.ranks.front(), join_names(hosts), placement_names(placements), format_size_short(limit),
                        format_size_short(charge.total()), parts);
    else if (one_rank)
      who = fmt::format("ranks {} on host(s) {} ({}) each run under a memory limit of {}, below what each will "
                        "hold in its own memory ({}{}: {})",
                        compress_ranges(o.ranks), join_names(hosts), placement_names(placements),
                        format_size_short(limit), up_to, format_size_short(charge.total()), parts);
    else if (o.scopes == 1)
      who = fmt::format("ranks {} on host {} ({}) share a memory limit of {} (one container or pod), below the {} "
                        "they will hold together ({})",
                        compress_ranges(o.ranks), join_names(hosts), placement_names(placements),
                        format_size_short(limit), format_size_short(charge.total()), parts);
    else
      who = fmt::format("ranks {} on host(s) {} ({}) share a memory limit of {} per {} ranks (one container or pod "
                        "each), below what each such group will hold together ({}{}: {})",
                        compress_ranges(o.ranks), join_names(hosts), placement_names(placements),
                        format_size_short(limit), ranks_per_scope, up_to, format_size_short(charge.total()), parts);
    problems.push_back(fmt::format(
        "{}; the kernel would OOM-kill {} while the tables are filled. Raise the limit: {}; or hold "
        "less per rank: a larger tp (host_private and host_head_sharded hold a 1/tp share), dp_shared_memory for "
        "host_shared where /dev/shm holds the tables (one copy per node), or cpu_offload: false (tables on the GPUs)",
        who, one_rank && o.scopes == 1 ? "it" : "them",
        memory_limit_fix(charge.total(), kHostHeadroomFloorBytesPerRank * ranks_per_scope, o.per_rank_field,
                         o.environments)));
  }
}

}  // namespace

std::optional<Warning> kv_cache_exhausted_warning(std::span<const HostMemory> hosts, const EngineMemory& engine) {
  // Hosts alike (the same GPU, tables, ranks and what is left) in one sentence.
  using Key = std::tuple<uint64_t, uint64_t, int64_t, int>;
  std::map<Key, std::vector<std::string>> alike;
  for (const HostMemory& h : hosts)
    if (h.kv_cache_left_bytes_min < 0)
      alike[{h.gpu_memory_bytes, h.hbm_bytes_per_gpu_max, h.kv_cache_left_bytes_min, h.rank_count}].push_back(h.name);
  if (alike.empty()) return std::nullopt;
  std::string text;
  for (const auto& [key, names] : alike) {
    const auto& [gpu, engram, left, ranks] = key;
    const uint64_t budget = static_cast<uint64_t>(static_cast<double>(gpu) * engine.gpu_memory_fraction);
    text += fmt::format(
        "{}nothing is left for the KV cache on host{} {} ({} rank{}{}): GPU memory {} x fraction {:.2f} = {}, less "
        "Engram tables and buffer {}{}, leaves {}",
        text.empty() ? "" : "; and ", names.size() == 1 ? "" : "(s)", join_names(names), ranks, ranks == 1 ? "" : "s",
        names.size() == 1 ? "" : " each", format_size_short(gpu), engine.gpu_memory_fraction,
        format_size_short(budget), format_size_short(engram),
        engine.gpu_reserved_bytes ? fmt::format(" and reserved {}", format_size_short(*engine.gpu_reserved_bytes))
                                  : std::string(),
        signed_size(left));
  }
  return Warning{"memory.hbm_exceeded",
                 fmt::format("{}. Change one of: shard the rows over more GPUs (more ranks in the shard group: a larger "
                             "tp or dp, shard_group: world), cpu_offload: true (tables in host memory), a higher "
                             "--gpu-memory-fraction{}",
                             text, engine.gpu_reserved_bytes ? ", or a smaller --gpu-reserved" : "")};
}

std::optional<Warning> kv_capacity_warning(std::span<const RankPlan> ranks, const ModelSpec& spec,
                                           const EngineMemory& engine) {
  if (spec.serving.kv_bytes_per_token == 0) return std::nullopt;
  std::vector<int> no_token, no_request;
  const RankPlan* example = nullptr;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankMemory& m = ranks[r].memory;
    if (m.kv_cache_left_bytes < 0) continue;  // memory.hbm_exceeded says it
    if (m.kv_cache_left_tokens == 0) {
      no_token.push_back(static_cast<int>(r));
    } else if (engine.context_length_tokens && m.max_concurrency == 0) {
      no_request.push_back(static_cast<int>(r));
    } else {
      continue;
    }
    if (example == nullptr) example = &ranks[r];
  }
  if (example == nullptr) return std::nullopt;
  const RankMemory& m = example->memory;
  std::string text;
  if (!no_token.empty())
    text = fmt::format("ranks {}: the KV cache left, {}, holds no token of {} (the model's "
                       "serving.kv_bytes_per_token): the engine would start and serve nothing",
                       compress_ranges(no_token), signed_size(m.kv_cache_left_bytes),
                       format_size_short(spec.serving.kv_bytes_per_token));
  if (!no_request.empty()) {
    const RankMemory& n = ranks[static_cast<size_t>(no_request.front())].memory;
    text += fmt::format("{}ranks {}: the KV cache left holds {} tokens, less than one request of {} tokens "
                        "(--context-length): maximum concurrency 0",
                        text.empty() ? "" : "; and ", compress_ranges(no_request), n.kv_cache_left_tokens,
                        *engine.context_length_tokens);
  }
  return Warning{"memory.no_request_fits",
                 fmt::format("{}. Change one of: shard the rows over more GPUs, cpu_offload: true (tables in host "
                             "memory), a higher --gpu-memory-fraction{}{}",
                             text, engine.gpu_reserved_bytes ? ", a smaller --gpu-reserved" : "",
                             no_request.empty() ? "" : ", a shorter --context-length")};
}

std::string host_tables_text(int copies) {
  if (copies == 0) return "table slices (of copies counted on another host)";
  return fmt::format("{} table cop{}", copies, copies == 1 ? "y" : "ies");
}

void add_host_memory_warnings(PlanResult& plan) {
  std::map<size_t, std::set<Placement>> placements_by_host;
  for (const RankPlan& r : plan.ranks)
    if (!is_device_placement(r.placement)) placements_by_host[static_cast<size_t>(r.host)].insert(r.placement);
  std::vector<std::string> names;
  std::set<Placement> placements;
  const HostMemory* example = nullptr;
  for (const HostMemory& h : plan.hosts) {
    if (h.host_memory_bytes == 0 || h.host_table_bytes > h.host_memory_bytes) continue;  // an error, not this
    if (h.host_table_bytes * 4 <= h.host_memory_bytes * 3) continue;
    names.push_back(h.name);
    const auto& p = placements_by_host[static_cast<size_t>(h.host)];
    placements.insert(p.begin(), p.end());
    if (example == nullptr) example = &h;
  }
  if (example == nullptr) return;
  const std::string names_of = placement_names(placements);
  append_unique(plan.warnings,
                Warning{"memory.host_tables_near_ram",
                        fmt::format("host(s) {} ({}): {} in host memory take {} of the host's {} of RAM "
                                    "({:.0f}%), leaving little for the OS and the engine; {}",
                                    join_names(names), names_of, host_tables_text(example->table_copies),
                                    format_size_short(example->host_table_bytes),
                                    format_size_short(example->host_memory_bytes),
                                    100.0 * static_cast<double>(example->host_table_bytes) /
                                        static_cast<double>(example->host_memory_bytes),
                                    host_fix(placements))});
}

Status check_memory_fits(const PlanResult& plan) {
  std::vector<std::string> problems;
  bool beyond_a_gpu = false;
  // GPUs: tables and buffer beyond the whole GPU, whatever the fraction.
  for (const PlacementGroupSummary& g : plan.groups) {
    uint64_t worst = 0;
    uint64_t gpu = 0;
    for (int r : g.ranks) {
      const RankMemory& m = plan.ranks[static_cast<size_t>(r)].memory;
      if (m.hbm_table_bytes + m.hbm_buffer_bytes > worst) {
        worst = m.hbm_table_bytes + m.hbm_buffer_bytes;
        gpu = m.gpu_memory_bytes;
      }
    }
    if (worst <= gpu) continue;
    beyond_a_gpu = true;
    const uint64_t per_rank_fit = gpu == 0 ? 0 : (plan.model.table_bytes_total + gpu - 1) / gpu;
    problems.push_back(fmt::format(
        "ranks {} ({}): the Engram tables and buffer take {} per GPU, more than the whole GPU's {}; shard the rows "
        "over at least {} GPUs (more ranks in the shard group: a larger tp or dp, shard_group: world) or keep the "
        "tables in host memory (cpu_offload: true)",
        g.ranks_text, placement_name(g.placement), format_size_short(worst), format_size_short(gpu),
        std::max<uint64_t>(per_rank_fit, 2)));
  }
  // Hosts: Engram's host tables beyond the host's RAM, alike hosts together.
  std::map<size_t, std::set<Placement>> placements_by_host;
  for (const RankPlan& r : plan.ranks)
    if (!is_device_placement(r.placement)) placements_by_host[static_cast<size_t>(r.host)].insert(r.placement);
  using Key = std::tuple<uint64_t, uint64_t, int, std::set<Placement>>;
  std::map<Key, std::vector<std::string>> over;
  for (const HostMemory& h : plan.hosts) {
    if (h.host_memory_bytes == 0 || h.host_table_bytes <= h.host_memory_bytes) continue;
    over[{h.host_table_bytes, h.host_memory_bytes, h.table_copies, placements_by_host[static_cast<size_t>(h.host)]}]
        .push_back(h.name);
  }
  for (const auto& [key, names] : over) {
    const auto& [tables, memory, copies, placements] = key;
    const std::string names_of = placement_names(placements);
    problems.push_back(fmt::format("host(s) {} ({}): {} in host memory take {}, more than the host's {} "
                                   "of RAM; {}",
                                   join_names(names), names_of, host_tables_text(copies),
                                   format_size_short(tables), format_size_short(memory), host_fix(placements)));
  }
  check_shm_enforced(plan, problems);
  check_memory_limits(plan, problems);
  // Nothing left for the KV cache: the engine could not start, unless the
  // user accepts it. (Tables beyond the whole GPU, named above, leave none
  // anyway.)
  if (!plan.deployment.engine.negative_kv_allowed && !beyond_a_gpu)
    if (const std::optional<Warning> kv = kv_cache_exhausted_warning(plan.hosts, plan.deployment.engine))
      problems.push_back(kv->text + "; or, where the engine's KV budget is set elsewhere, accept it: "
                                    "engine.allow_negative_kv: true (--allow-negative-kv)");
  if (problems.empty()) return Status::ok();
  std::string message = "the deployment cannot run: ";
  for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; and " : "") + problems[i];
  return resource_exhausted(std::move(message));
}

Result<PlanResult> plan_that_fits(const Deployment& deployment, WarningSink& sink,
                                  const std::vector<MemoryLimitScope>* limits) {
  ENGRAM_ASSIGN_OR_RETURN(PlanResult plan, plan_deployment(deployment, sink));
  if (limits != nullptr) plan.memory_limits = *limits;
  ENGRAM_RETURN_IF_ERROR(check_memory_fits(plan));
  return plan;
}

Result<FitCheckedPlan> plan_with_memory_fit(const Deployment& deployment, WarningSink& sink) {
  ENGRAM_ASSIGN_OR_RETURN(PlanResult plan, plan_deployment(deployment, sink));
  add_host_memory_warnings(plan);
  add_memory_margin_warnings(plan);
  Status fits = check_memory_fits(plan);
  return FitCheckedPlan{std::move(plan), std::move(fits)};
}

}  // namespace engram
