#include "core/exchange/handle_type_plan.h"

#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "core/base/text_list.h"

namespace engram {

Result<HandleType> choose_handle_type(std::span<const HandleFacts> facts_by_rank) {
  if (facts_by_rank.empty()) return invalid_argument("choose_handle_type: no ranks given; pass one fact per rank");
  const HandleFacts& first = facts_by_rank[0];
  bool all_fabric = true, all_imex = true, one_domain = !first.nvlink_domain.empty(), one_host = true,
       all_posix = true;
  for (const HandleFacts& f : facts_by_rank) {
    all_posix &= f.posix_fd_supported;
    all_fabric &= f.fabric_probe_ok;
    all_imex &= f.imex_channel;
    one_domain &= f.nvlink_domain == first.nvlink_domain;
    one_host &= f.same_host(first);
  }
  if (all_fabric && all_imex && one_domain) return HandleType::kFabric;
  if (one_host && all_posix) return HandleType::kPosixFd;

  // No handle type works: name the hosts, domains and what each lacks (built
  // only here, since every rank of every group decides on the way in).
  std::set<std::string> hosts, domains, no_imex, no_fabric, no_domain, no_posix;
  for (const HandleFacts& f : facts_by_rank) {
    // As HostIdentity::to_string; a plan's hosts by name where the boot id is its default.
    const bool default_boot = f.predicted && f.boot_id == fmt::format("boot-{}", f.hostname);
    const std::string host = default_boot ? std::string(f.hostname) : fmt::format("{}/{}", f.hostname, f.boot_id);
    hosts.insert(host);
    if (!f.posix_fd_supported) no_posix.insert(host);
    domains.insert(f.nvlink_domain.empty() ? "(none)" : std::string(f.nvlink_domain));
    if (!f.imex_channel) no_imex.insert(host);
    if (!f.fabric_probe_ok) no_fabric.insert(host);
    if (f.nvlink_domain.empty()) no_domain.insert(host);
  }

  auto list = [](const std::set<std::string>& s) {
    std::vector<std::string> v(s.begin(), s.end());
    return join_limited(v);
  };
  std::vector<std::string> missing;
  if (!no_imex.empty()) missing.push_back(fmt::format("IMEX channel missing on {}", list(no_imex)));
  const bool predicted = first.predicted;
  if (!no_fabric.empty())
    missing.push_back(predicted ? fmt::format("FABRIC handle support not stated (fabric_attribute: false) on {}",
                                              list(no_fabric))
                                : fmt::format("fabric support (FABRIC create/export probe) failing on {}",
                                              list(no_fabric)));
  if (!no_domain.empty()) missing.push_back(fmt::format("NVLink domain missing on {}", list(no_domain)));
  if (no_domain.empty() && !one_domain)
    missing.push_back(fmt::format("NVLink domain: the ranks span {} domains", domains.size()));
  std::string text;
  for (size_t i = 0; i < missing.size(); ++i) text += (i ? "; " : "") + missing[i];
  if (one_host)
    return failed_precondition(fmt::format(
        "no shareable handle type works for this group: it is on one host ({}) but POSIX fd handles are not "
        "supported on {} (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0), and FABRIC "
        "lacks: {}. Fix: a driver and device with POSIX fd or FABRIC handle support, or a placement that shares "
        "no device memory",
        list(hosts), list(no_posix), text.empty() ? "nothing named" : text));
  return failed_precondition(fmt::format(
      "no shareable handle type works for this group: it spans {} hosts ({}) so POSIX fds cannot reach, and "
      "FABRIC needs every rank in one NVLink/IMEX domain with an IMEX channel; domains: {}; missing: {}. Fix: "
      "create IMEX channels on every host of one NVLink domain, or shard within a host (shard_group: host)",
      hosts.size(), list(hosts), list(domains), text));
}

}  // namespace engram
