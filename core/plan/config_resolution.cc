#include "core/plan/config_resolution.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include <map>

#include "core/base/size_text.h"
#include "core/plan/shm_fix.h"
#include "core/base/text_list.h"

namespace engram {

Status validate_dp_shared_memory_strict(const EngramConfig& config, const ParallelLayout& layout,
                                        std::span<const HostShmFacts> hosts, uint64_t table_bytes_total) {
  std::vector<std::string> unmet;
  if (!config.cpu_offload) {
    unmet.push_back("cpu_offload is off: shared host tables only exist with CPU offload; set cpu_offload: true "
                    "or unset dp_shared_memory");
  }
  if (layout.dp <= 1) {
    unmet.push_back(fmt::format("dp = {}: there is no second DP replica to share with; use dp > 1 or unset "
                                "dp_shared_memory", layout.dp));
  }
  if (layout.elastic_ep) {
    unmet.push_back("elastic EP is on: replicas come and go, so a node's shared table has no stable owners; "
                    "turn elastic_ep off or unset dp_shared_memory");
  }
  // The hosts host_shared's own check finds unfit, each cause's hosts with
  // their sizes; each fix is given once, after the list (repeated per host
  // or size it would make the message grow with the deployment).
  const std::vector<HostShmUnmet> unfit = host_shared_fitness(hosts, table_bytes_total);
  std::vector<std::string> alone, missing;
  EnvironmentSet alone_environments, shm_environments;
  std::map<uint64_t, std::vector<std::string>> small_by_total;
  for (const HostShmUnmet& u : unfit) {
    for (FallbackCause cause : u.causes) {
      switch (cause) {
        case FallbackCause::kGroupSizeOne:
          // With dp = 1 a group of one is expected, named above as dp = 1.
          if (layout.dp <= 1) break;
          alone.push_back(u.host.host_name);
          alone_environments.add(u.host.environment);
          break;
        case FallbackCause::kShmMissing:
          missing.push_back(u.host.host_name);
          shm_environments.add(u.host.environment);
          break;
        case FallbackCause::kShmTooSmall:
          small_by_total[u.host.tmpfs_bytes_total].push_back(u.host.host_name);
          shm_environments.add(u.host.environment);
          break;
      }
    }
  }
  std::vector<std::string> fixes;
  if (!alone.empty()) {
    unmet.push_back(fmt::format(
        "replicas not co-located: the node-local Engram DP group has size 1 on host(s) {} (a replica "
        "straddles hosts, or no other replica of the same TP rank is on the host)",
        join_limited(alone)));
    fixes.push_back(colocation_fix_text(alone_environments));
  }
  if (!missing.empty()) {
    unmet.push_back(fmt::format("/dev/shm missing on host(s) {}: {} needed", join_limited(missing),
                                format_size_short(table_bytes_total)));
  }
  // Hosts grouped by their tmpfs total, so a thousand alike hosts make one
  // line; past a few sizes, the rest are counted.
  constexpr size_t kSizesShown = 3;
  size_t sizes = 0, hosts_not_shown = 0;
  for (const auto& [total, names] : small_by_total) {
    if (sizes++ >= kSizesShown) {
      hosts_not_shown += names.size();
      continue;
    }
    unmet.push_back(fmt::format("/dev/shm too small on host(s) {}: {} needed, {} available (tmpfs total)",
                                join_limited(names), format_size_short(table_bytes_total), format_size_short(total)));
  }
  if (hosts_not_shown > 0) {
    unmet.push_back(fmt::format("/dev/shm too small on {} more host(s) of {} other sizes", hosts_not_shown,
                                sizes - kSizesShown));
  }
  if (!missing.empty() || !small_by_total.empty()) fixes.push_back(shm_fix_text(table_bytes_total, shm_environments));
  if (unmet.empty()) return Status::ok();
  std::string message = fmt::format("dp_shared_memory: true cannot work ({} unmet requirement{}): ",
                                    unmet.size(), unmet.size() == 1 ? "" : "s");
  for (size_t i = 0; i < unmet.size(); ++i) message += fmt::format("{}({}) {}", i ? "; " : "", i + 1, unmet[i]);
  for (const std::string& fix : fixes) message += ". " + fix;
  return failed_precondition(std::move(message));
}

}  // namespace engram
