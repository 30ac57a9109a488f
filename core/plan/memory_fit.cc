#include "core/plan/memory_fit.h"

#include <fmt/format.h>

#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "core/base/size_text.h"
#include "core/base/text_list.h"
#include "core/base/units.h"

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

}  // namespace

Warning kv_cache_exhausted_warning(const HostMemory& h, const EngineMemory& engine) {
  const uint64_t budget = static_cast<uint64_t>(static_cast<double>(h.gpu_memory_bytes) * engine.gpu_memory_fraction);
  return Warning{
      "memory.hbm_exceeded",
      fmt::format("nothing is left for the KV cache on host {} ({} rank{}): GPU memory {} x fraction {:.2f} = {}, "
                  "less Engram tables and buffer {}{}, leaves {}. Change one of: shard the rows over more GPUs "
                  "(more ranks in the shard group: a larger tp or dp, shard_group: world), cpu_offload: true "
                  "(tables in host memory), a higher --gpu-memory-fraction{}",
                  h.name, h.rank_count, h.rank_count == 1 ? "" : "s", format_size_short(h.gpu_memory_bytes),
                  engine.gpu_memory_fraction, format_size_short(budget), format_size_short(h.hbm_bytes_per_gpu_max),
                  engine.gpu_reserved_bytes ? fmt::format(" and reserved {}", format_size_short(*engine.gpu_reserved_bytes))
                                            : std::string(),
                  signed_size(h.kv_cache_left_bytes_min),
                  engine.gpu_reserved_bytes ? ", or a smaller --gpu-reserved" : "")};
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
  std::string names_of;
  for (Placement p : placements) names_of += (names_of.empty() ? "" : ", ") + std::string(placement_name(p));
  append_unique(plan.warnings,
                Warning{"memory.host_tables_near_ram",
                        fmt::format("host(s) {} ({}): {} table cop{} in host memory take {} of the host's {} of RAM "
                                    "({:.0f}%), leaving little for the OS and the engine; {}",
                                    join_limited(names), names_of, example->table_copies,
                                    example->table_copies == 1 ? "y" : "ies",
                                    format_size_short(example->host_table_bytes),
                                    format_size_short(example->host_memory_bytes),
                                    100.0 * static_cast<double>(example->host_table_bytes) /
                                        static_cast<double>(example->host_memory_bytes),
                                    host_fix(placements))});
}

Status check_memory_fits(const PlanResult& plan) {
  std::vector<std::string> problems;
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
    std::string names_of;
    for (Placement p : placements) names_of += (names_of.empty() ? "" : ", ") + std::string(placement_name(p));
    problems.push_back(fmt::format("host(s) {} ({}): {} table cop{} in host memory take {}, more than the host's {} "
                                   "of RAM; {}",
                                   join_limited(names), names_of, copies, copies == 1 ? "y" : "ies",
                                   format_size_short(tables), format_size_short(memory), host_fix(placements)));
  }
  if (problems.empty()) return Status::ok();
  std::string message = "the deployment cannot run: ";
  for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; and " : "") + problems[i];
  return resource_exhausted(std::move(message));
}

Result<FitCheckedPlan> plan_with_memory_fit(const Deployment& deployment, WarningSink& sink) {
  ENGRAM_ASSIGN_OR_RETURN(PlanResult plan, plan_deployment(deployment, sink));
  add_host_memory_warnings(plan);
  Status fits = check_memory_fits(plan);
  return FitCheckedPlan{std::move(plan), std::move(fits)};
}

}  // namespace engram
