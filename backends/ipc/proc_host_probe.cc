#include "backends/ipc/proc_host_probe.h"

#include "backends/ipc/runtime_environment_probe.h"
#include "backends/shm/memory_cgroup.h"
#include "core/base/text_excerpt.h"

#include <sys/utsname.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

namespace engram::ipc {

Result<HostIdentity> read_host_identity() {
  HostIdentity id;
  struct utsname uts{};
  if (::uname(&uts) != 0) return failed_precondition(std::string("uname() failed: ") + std::strerror(errno));
  // Printed in reports and warnings: a name holding control characters is
  // kept only escaped (every rank of the host escapes it alike).
  id.hostname = excerpt(uts.nodename, kEchoedValueBytes);
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  if (!std::getline(in, id.boot_id) || id.boot_id.empty()) {
    return failed_precondition("cannot read /proc/sys/kernel/random/boot_id: is /proc mounted?");
  }
  return id;
}

PlacementFacts ProcHostProbe::facts() {
  PlacementFacts facts;
  auto id = read_host_identity();
  // facts() cannot fail by interface; a host with no readable boot id keeps
  // its hostname, which still separates hosts by name.
  if (id.is_ok()) {
    facts.host = *id;
  } else {
    struct utsname uts{};
    if (::uname(&uts) == 0) facts.host.hostname = excerpt(uts.nodename, kEchoedValueBytes);
  }
  facts.imex_channel = has_imex_channel(imex_channel_dir_);
  facts.environment = runtime_environment_of_this_process();
  return facts;
}

std::optional<uint64_t> read_mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    uint64_t kib = 0;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB") return kib * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

MemoryFacts ProcHostProbe::memory() {
  MemoryFacts facts;
  facts.host_memory_bytes = host_memory_bytes_ ? *host_memory_bytes_ : read_mem_total_bytes().value_or(0);
  // The cgroup that limits this process (the tightest on its way up): its
  // path names it, so the ranks of one container report one key. An
  // unreadable usage file leaves the limit unknown here; the /dev/shm fill
  // reports it where it matters.
  auto cgroup = shm::this_process_memory_cgroup();
  if (cgroup.is_ok() && cgroup->has_value())
    facts.limits[0] = {std::hash<std::string>{}((*cgroup)->path) | 1, (*cgroup)->limit_bytes};
  return facts;
}

}  // namespace engram::ipc
