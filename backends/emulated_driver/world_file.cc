#include "backends/emulated_driver/world_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "core/deployment/deployment_validate.h"
#include "core/deployment_file/deployment_yaml.h"
#include "core/model/gpu_models.h"

namespace engram::emulated {

Result<std::string> world_file_text(const Deployment& deployment, const std::vector<WorldFault>& faults) {
  std::string out = "engramlab-emulated-world 1\n";
  for (size_t i = 0; i < deployment.hosts.size(); ++i) {
    const HostSpec& h = deployment.hosts[i];
    for (const auto& [field, value] : {std::pair{"name", h.name}, std::pair{"nvlink_domain", h.nvlink_domain},
                                       std::pair{"boot_id", h.boot_id}}) {
      const std::string why = unwritable_world_value(value);
      if (!why.empty())
        return invalid_argument(fmt::format("hosts[{}].{} '{}' {}: the emulated driver's world file cannot carry it",
                                            i, field, value, why));
    }
    ENGRAM_ASSIGN_OR_RETURN(const GpuModelInfo model, find_gpu_model(h.gpu_model));
    ENGRAM_CHECK(h.gpu_memory_bytes > 0);  // validate_and_complete resolved it
    out += fmt::format(
        "host name={} boot_id={} gpus={} model={} memory_bytes={} granularity_bytes={} domain={} imex={} fabric={} "
        "posix={} visible_gpus_per_rank={}\n",
        h.name, h.boot_id, h.gpu_count, model.name, h.gpu_memory_bytes,
        model.vmm_granularity_bytes ? model.vmm_granularity_bytes : kVmmGranularityBytes,
        h.nvlink_domain.empty() ? "-" : h.nvlink_domain, h.imex_channel ? 1 : 0, h.fabric_attribute ? 1 : 0,
        h.posix_fd_attribute ? 1 : 0, h.visible_gpus_per_rank);
  }
  out += "ranks";
  for (int host : deployment.rank_hosts) out += fmt::format(" {}", host);
  out += "\n";
  for (const WorldFault& f : faults)
    out += fmt::format("fault site={} rank={} nth={} delay_ms={}\n", f.site, f.rank, f.nth, f.delay_ms);
  World check;
  std::string why;
  ENGRAM_CHECK(parse_world(out, check, why));  // what we write, the driver reads
  return out;
}

Status write_world_file(const std::string& deployment_path, const std::string& world_path,
                        const std::vector<WorldFault>& faults) {
  ENGRAM_ASSIGN_OR_RETURN(const Deployment loaded, load_deployment_file(deployment_path));
  ENGRAM_ASSIGN_OR_RETURN(const Deployment complete, validate_and_complete(loaded));
  ENGRAM_ASSIGN_OR_RETURN(const std::string text, world_file_text(complete, faults));
  const int fd = ::open(world_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return failed_precondition(fmt::format("cannot write the emulated world file {}: {}", world_path,
                                           std::strerror(errno)));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written) return failed_precondition(fmt::format("cannot write the emulated world file {}", world_path));
  return Status::ok();
}

std::vector<LocalPlace> local_places(const std::vector<int>& rank_hosts) {
  std::map<int, int> per_host;
  std::vector<LocalPlace> out;
  for (int host : rank_hosts) out.push_back({per_host[host]++, 0});
  for (size_t r = 0; r < rank_hosts.size(); ++r) out[r].local_world_size = per_host[rank_hosts[r]];
  return out;
}

}  // namespace engram::emulated
