// The handle type a device-sharing group must agree on before anyone
// allocates (docs/design.md section 5). Used by `plan` as a prediction and by the
// real handle exchange as its decision rule, so both decide alike.
#pragma once

#include <span>
#include <string_view>

#include "core/backend/device_memory.h"
#include "core/backend/host_probe.h"
#include "core/base/status.h"

namespace engram {

// One rank's facts as the handle type depends on them. Views: the caller
// keeps the strings alive for the call (every rank of every group decides,
// so nothing is copied per member).
struct HandleFacts {
  std::string_view hostname;
  std::string_view boot_id;        // hostname + boot id name a host
  std::string_view nvlink_domain;  // "" when the GPU is in no NVLink domain
  bool imex_channel = false;
  bool fabric_probe_ok = false;    // a real FABRIC create + export succeeded (the attribute alone can lie)
  bool posix_fd_supported = true;  // the device reports POSIX fd handles (DeviceInfo::posix_fd_supported)
  // From a deployment's hosts, not a machine (plan): nothing was probed, so
  // fabric_probe_ok is the stated fabric_attribute, and a host is named by
  // its name alone where its boot id is the plan's own default.
  bool predicted = false;

  static HandleFacts of(const PlacementFacts& placement, bool fabric_probe_ok, bool posix_fd_supported = true) {
    return {placement.host.hostname, placement.host.boot_id, placement.nvlink_domain, placement.imex_channel,
            fabric_probe_ok, posix_fd_supported};
  }
  bool same_host(const HandleFacts& other) const { return hostname == other.hostname && boot_id == other.boot_id; }
};

// FABRIC when every rank's fabric probe works, every rank has an IMEX channel
// and all share one non-empty NVLink domain; else POSIX fds when all ranks are
// on one host (hostname + boot id) and every device supports them; else failed_precondition naming the
// hosts, the domains and the missing capability. O(ranks log hosts).
Result<HandleType> choose_handle_type(std::span<const HandleFacts> facts_by_rank);

}  // namespace engram
