#include "core/plan/shm_fix.h"

#include <fmt/format.h>

#include <vector>

#include "core/base/size_text.h"
#include "core/base/units.h"

namespace engram {
namespace {

std::string join_fixes(const std::vector<std::string>& fixes) {
  std::string out;
  for (size_t i = 0; i < fixes.size(); ++i) out += (i ? "; " : "") + fixes[i];
  return out;
}

}  // namespace

bool EnvironmentSet::applies(RuntimeEnvironment which) const {
  const auto bit = [](RuntimeEnvironment e) { return static_cast<uint8_t>(1u << static_cast<unsigned>(e)); };
  return bits_ == 0 || (bits_ & bit(RuntimeEnvironment::kUnknown)) != 0 || (bits_ & bit(which)) != 0;
}

std::string shm_fix_text(uint64_t table_bytes_total, EnvironmentSet environment) {
  // Docker's g, tmpfs's G and Kubernetes' Gi are all GiB; the tables plus the headroom the rest of /dev/shm needs.
  const uint64_t gib = (table_bytes_total + kShmFixHeadroomBytes + kGiB - 1) / kGiB;
  std::vector<std::string> fixes;
  if (environment.applies(RuntimeEnvironment::kDocker))
    fixes.push_back(fmt::format("Docker: start the container with --shm-size={}g, or --ipc=host to use the host's "
                                "/dev/shm", gib));
  if (environment.applies(RuntimeEnvironment::kKubernetes))
    fixes.push_back(fmt::format("Kubernetes: mount an emptyDir volume with medium: Memory and sizeLimit: {}Gi at "
                                "/dev/shm (and a memory limit that covers it)", gib));
  if (environment.applies(RuntimeEnvironment::kBareMetal))
    fixes.push_back(fmt::format("bare metal: mount -o remount,size={}G /dev/shm (as root; the default is half the "
                                "RAM)", gib));
  return fmt::format("fix ({}GiB: the tables' {} + {} headroom): {}; or set dp_shared_memory: false to opt out "
                     "(each replica then keeps its own host copy)",
                     gib, format_size_short(table_bytes_total), format_size_short(kShmFixHeadroomBytes),
                     join_fixes(fixes));
}

std::string colocation_fix_text(EnvironmentSet environment) {
  std::vector<std::string> fixes;
  fixes.push_back("place whole DP replicas per node, more than one replica per TP rank");
  if (environment.applies(RuntimeEnvironment::kDocker))
    fixes.push_back("Docker: containers that do not share the host's IPC namespace look like separate nodes; run "
                    "them with --ipc=host");
  if (environment.applies(RuntimeEnvironment::kKubernetes))
    fixes.push_back("Kubernetes: run a node's replicas as containers of one pod (they share its IPC namespace) or "
                    "set hostIPC: true");
  return fmt::format("fix: {}; or set dp_shared_memory: false to opt out", join_fixes(fixes));
}

}  // namespace engram
