// The handle type a device-sharing group must agree on before anyone
// allocates (DESIGN.md section 5). Used by `plan` as a prediction and by the
// real handle exchange as its decision rule, so both decide alike.
#pragma once

#include <span>

#include "core/backend/device_memory.h"
#include "core/backend/host_probe.h"
#include "core/base/status.h"

namespace engram {

struct HandleFacts {
  PlacementFacts placement;
  bool fabric_probe_ok = false;  // a real FABRIC create + export succeeded (the attribute alone can lie)
};

// FABRIC when every rank's fabric probe works, every rank has an IMEX channel
// and all share one non-empty NVLink domain; else POSIX fds when all ranks are
// on one host (hostname + boot id); else failed_precondition naming the
// hosts, the domains and the missing capability. O(ranks log hosts).
Result<HandleType> choose_handle_type(std::span<const HandleFacts> facts_by_rank);

}  // namespace engram
