#include "core/deployment/deployment_validate.h"

#include <fmt/format.h>

#include "core/model/gpu_models.h"

namespace engram {

Result<std::vector<int>> resolve_rank_hosts(const Deployment& d) {
  const int world = d.layout.world_size();
  const int host_count = static_cast<int>(d.hosts.size());
  std::vector<int> ranks_on_host(d.hosts.size(), 0);
  std::vector<int> map;
  if (d.rank_hosts.empty()) {
    int64_t gpus_total = 0;
    for (const HostSpec& h : d.hosts) gpus_total += h.gpu_count;
    if (gpus_total != world) {
      return invalid_argument(fmt::format(
          "layout: tp * dp = {} * {} = {} ranks, but the hosts give {} ranks ({} hosts, one rank per GPU); "
          "change tp/dp, the host count or gpus per host, or give rank_hosts explicitly",
          d.layout.tp, d.layout.dp, world, gpus_total, host_count));
    }
    map.reserve(static_cast<size_t>(world));
    for (int h = 0; h < host_count; ++h)
      for (int g = 0; g < d.hosts[static_cast<size_t>(h)].gpu_count; ++g) map.push_back(h);
    return map;
  }
  if (static_cast<int64_t>(d.rank_hosts.size()) != world) {
    return invalid_argument(fmt::format(
        "rank_hosts: has {} entries but tp * dp = {} * {} = {} ranks; give one host index per rank",
        d.rank_hosts.size(), d.layout.tp, d.layout.dp, world));
  }
  for (size_t r = 0; r < d.rank_hosts.size(); ++r) {
    int h = d.rank_hosts[r];
    if (h < 0 || h >= host_count) {
      return invalid_argument(fmt::format("rank_hosts[{}]: host index {} is out of range; hosts are 0..{}",
                                          r, h, host_count - 1));
    }
    ++ranks_on_host[static_cast<size_t>(h)];
  }
  for (int h = 0; h < host_count; ++h) {
    const HostSpec& host = d.hosts[static_cast<size_t>(h)];
    if (ranks_on_host[static_cast<size_t>(h)] > host.gpu_count) {
      return invalid_argument(fmt::format(
          "rank_hosts: {} ranks placed on host {} ('{}') but it has {} GPUs; move ranks or raise its gpus",
          ranks_on_host[static_cast<size_t>(h)], h, host.name, host.gpu_count));
    }
  }
  return d.rank_hosts;
}

Result<Deployment> validate_and_complete(const Deployment& input) {
  Deployment d = input;
  const ParallelLayout& l = d.layout;
  auto positive = [](const char* field, int value) -> Status {
    if (value >= 1) return Status::ok();
    return invalid_argument(fmt::format("{}: {} must be at least 1", field, value));
  };
  ENGRAM_RETURN_IF_ERROR(positive("layout.tp", l.tp));
  ENGRAM_RETURN_IF_ERROR(positive("layout.dp", l.dp));
  ENGRAM_RETURN_IF_ERROR(positive("layout.ep", l.ep));
  ENGRAM_RETURN_IF_ERROR(positive("layout.prefill_cp", l.prefill_cp));
  ENGRAM_RETURN_IF_ERROR(positive("config.tokens_per_rank_max", d.config.tokens_per_rank_max));
  if (static_cast<int64_t>(l.tp) * l.dp > (1 << 24)) {
    return invalid_argument(fmt::format("layout: tp * dp = {} * {} is too large", l.tp, l.dp));
  }
  if (l.world_size() % l.ep != 0) {
    return invalid_argument(fmt::format("layout.ep: {} does not divide the world of tp * dp = {} ranks; "
                                        "choose an ep that divides it", l.ep, l.world_size()));
  }
  if (d.hosts.empty()) return invalid_argument("hosts: no hosts given; describe at least one host");
  for (size_t i = 0; i < d.hosts.size(); ++i) {
    HostSpec& h = d.hosts[i];
    if (h.name.empty()) return invalid_argument(fmt::format("hosts[{}].name: empty; give each host a name", i));
    if (h.gpu_count < 1) {
      return invalid_argument(fmt::format("hosts[{}].gpus: {} for host '{}'; a host needs at least 1 GPU",
                                          i, h.gpu_count, h.name));
    }
    if (h.visible_gpus_per_rank < 0 || h.visible_gpus_per_rank > h.gpu_count) {
      return invalid_argument(fmt::format(
          "hosts[{}].visible_gpus_per_rank: {} for host '{}'; use 0 (all) up to its {} GPUs", i,
          h.visible_gpus_per_rank, h.name, h.gpu_count));
    }
    auto memory = default_gpu_memory_bytes(h.gpu_model);
    if (!memory.is_ok()) {
      return invalid_argument(fmt::format("hosts[{}].{}", i, memory.status().message()));
    }
    if (h.gpu_memory_bytes == 0) h.gpu_memory_bytes = memory.value();
    if (h.boot_id.empty()) h.boot_id = "boot-" + h.name;  // one boot per named host by default
    if (!h.shm_mounted && h.tmpfs_bytes_total != 0) h.tmpfs_bytes_total = 0;  // nothing mounted, nothing there
  }
  ENGRAM_ASSIGN_OR_RETURN(d.rank_hosts, resolve_rank_hosts(d));
  return d;
}

}  // namespace engram
