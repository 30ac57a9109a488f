#include "core/plan/placement_rules.h"

#include "core/plan/shm_fix.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/check.h"
#include "core/base/size_text.h"
#include "core/base/text_list.h"

namespace engram {

PlacementDecision decide_rank_placement(const EngramConfig& config, const DpSharedMemoryResolution& shared,
                                        const HostShmFacts& facts, uint64_t table_bytes_total) {
  PlacementDecision d;
  if (!config.placement.empty()) {
    auto forced = parse_placement(config.placement);
    ENGRAM_CHECK_MSG(forced.is_ok(), "config.placement was not validated when the deployment was read");
    d.placement = forced.value();
    d.reason = fmt::format("config.placement: {} as written (the rules are not asked)", config.placement);
    return d;
  }
  const bool host_table_asked = config.cpu_offload || (shared.is_explicit && shared.enabled);
  if (config.peer_shards) {
    d.placement = Placement::kDevicePeer;
    d.peer_precedence = host_table_asked;
    d.reason = host_table_asked
                   ? "peer_shards on: device_peer takes precedence over the host table asked for by "
                     "cpu_offload/dp_shared_memory"
                   : "peer_shards on, cpu_offload off: device_peer";
    return d;
  }
  if (!config.cpu_offload && !(shared.is_explicit && shared.enabled)) {
    d.placement = Placement::kDeviceCollective;
    d.reason = "cpu_offload off, peer_shards off: device_collective (TP row shard per GPU)";
    return d;
  }
  if (!shared.enabled) {
    d.placement = Placement::kHostPrivate;
    d.reason = fmt::format("cpu_offload on, dp_shared_memory {}: host_private (one host copy per replica, a TP slice per rank)",
                           shared.is_explicit ? "false as written" : "resolved disabled");
    return d;
  }
  d.fallback_causes = host_shared_unmet(facts, table_bytes_total);
  if (shared.is_explicit) {
    // Strict validation rejected every such case before we got here.
    ENGRAM_CHECK(config.cpu_offload);
    ENGRAM_CHECK(d.fallback_causes.empty());
  }
  if (d.fallback_causes.empty()) {
    d.placement = Placement::kHostShared;
    d.reason = fmt::format(
        "dp_shared_memory enabled, node-local group of {}, /dev/shm tmpfs total {} >= tables {}: host_shared "
        "(one copy per node)",
        facts.min_node_local_group_size, format_size_short(facts.tmpfs_bytes_total),
        format_size_short(table_bytes_total));
    return d;
  }
  d.placement = Placement::kHostHeadSharded;
  std::string causes;
  for (FallbackCause c : d.fallback_causes)
    causes += (causes.empty() ? "" : ", ") + unmet_text(c, facts, table_bytes_total);
  d.reason = fmt::format("dp_shared_memory resolved enabled but cannot work ({}): fallback host_head_sharded",
                         causes);
  return d;
}

namespace {

// vLLM's wording of the same causes: only the /dev/shm-size one names the
// container fixes; the others say the tables fall back to per rank.
std::string vllm_fallback_text(FallbackCause cause, const std::string& where, const std::string& sized_where,
                               const std::string& needed) {
  switch (cause) {
    case FallbackCause::kGroupSizeOne:
      return fmt::format("vLLM: Engram dp_shared_memory needs a node-local Engram DP group with size > 1, and it has "
                         "size 1 on host(s) {}; falling back to Engram tables per rank.",
                         where);
    case FallbackCause::kShmMissing:
      return fmt::format("vLLM: /dev/shm is missing on host(s) {}; falling back to Engram tables per rank.", where);
    case FallbackCause::kShmTooSmall:
      return fmt::format("vLLM: /dev/shm on host(s) {} is smaller than the Engram tables' {}; increase /dev/shm "
                         "(e.g. --shm-size or --ipc=host); falling back to Engram tables per rank.",
                         sized_where, needed);
  }
  return "";
}

// The warning for one cause, over the hosts where it holds.
Warning fallback_warning(FallbackCause cause, const std::vector<const HostShmUnmet*>& hosts,
                         uint64_t table_bytes_total, FallbackWording wording) {
  ENGRAM_CHECK(!hosts.empty());
  std::vector<std::string> names;
  EnvironmentSet environments;
  // kShmTooSmall: "host(s) a, c is 64 MiB" for one size, else each size
  // after its hosts: "host(s) a, c (64 MiB) and b (100.0 GiB) are".
  std::vector<std::pair<uint64_t, std::vector<std::string>>> by_size;
  for (const HostShmUnmet* u : hosts) {
    names.push_back(u->host.host_name);
    environments.add(u->host.environment);
    const uint64_t size = u->host.tmpfs_bytes_total;
    auto it = std::find_if(by_size.begin(), by_size.end(), [&](const auto& e) { return e.first == size; });
    if (it == by_size.end()) it = by_size.insert(by_size.end(), {size, {}});
    it->second.push_back(u->host.host_name);
  }
  const std::string where = join_limited(names);
  std::string sized_where;
  for (size_t i = 0; i < by_size.size(); ++i)
    sized_where += fmt::format("{}{} ({})", i == 0 ? "" : i + 1 == by_size.size() ? " and " : ", ",
                               join_limited(by_size[i].second), format_size_short(by_size[i].first));
  const std::string needed = format_size_short(table_bytes_total);
  Warning w;
  w.key = std::string("dp_shared_memory.fallback.") + fallback_cause_name(cause);
  if (wording == FallbackWording::kVllm) {
    w.text = vllm_fallback_text(cause, where, sized_where, needed);
    return w;
  }
  switch (cause) {
    case FallbackCause::kGroupSizeOne:
      w.text = fmt::format(
          "dp_shared_memory resolved to enabled, but the node-local Engram DP group has size 1 on host(s) {}; "
          "falling back to host_head_sharded. The DP replicas must be co-located: each node must hold whole "
          "replicas, with more than one replica per TP rank, and see one /dev/shm of at least {}. {}.",
          where, needed, colocation_fix_text(environments));
      break;
    case FallbackCause::kShmMissing:
      w.text = fmt::format(
          "dp_shared_memory resolved to enabled, but /dev/shm is missing on host(s) {}; falling back to "
          "host_head_sharded. A /dev/shm of at least {} is needed; {}.",
          where, needed, shm_fix_text(table_bytes_total, environments));
      break;
    case FallbackCause::kShmTooSmall:
      w.text = by_size.size() == 1
                   ? fmt::format("dp_shared_memory resolved to enabled, but /dev/shm on host(s) {} is {} (tmpfs "
                                 "total), smaller than the tables' {}; falling back to host_head_sharded. {}.",
                                 where, format_size_short(by_size[0].first), needed,
                                 shm_fix_text(table_bytes_total, environments))
                   : fmt::format("dp_shared_memory resolved to enabled, but /dev/shm on host(s) {} is smaller (tmpfs "
                                 "totals) than the tables' {}; falling back to host_head_sharded. {}.",
                                 sized_where, needed, shm_fix_text(table_bytes_total, environments));
      break;
  }
  return w;
}

}  // namespace

std::vector<Warning> fallback_warnings(std::span<const HostShmUnmet> unfit, uint64_t table_bytes_total,
                                       FallbackWording wording) {
  std::vector<Warning> out;
  for (FallbackCause cause : {FallbackCause::kGroupSizeOne, FallbackCause::kShmMissing, FallbackCause::kShmTooSmall}) {
    std::vector<const HostShmUnmet*> hosts;
    for (const HostShmUnmet& u : unfit)
      if (std::find(u.causes.begin(), u.causes.end(), cause) != u.causes.end()) hosts.push_back(&u);
    if (!hosts.empty()) out.push_back(fallback_warning(cause, hosts, table_bytes_total, wording));
  }
  return out;
}

Warning peer_precedence_warning() {
  return Warning{"peer_shards.precedence",
                 "peer_shards and a host table (cpu_offload / dp_shared_memory) are both asked for: peer_shards "
                 "takes precedence, the tables live in GPU memory as device_peer shards and no host table is "
                 "built. Turn cpu_offload off to silence this, or peer_shards off to keep the host table."};
}

}  // namespace engram
