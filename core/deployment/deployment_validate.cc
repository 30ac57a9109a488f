#include "core/deployment/deployment_validate.h"

#include "core/base/text_list.h"

#include <map>

#include <fmt/format.h>

#include "core/base/checked_math.h"
#include "core/base/size_text.h"
#include "core/base/text_excerpt.h"
#include "core/base/units.h"
#include "core/deployment/cp_groups.h"
#include "core/model/gpu_models.h"
#include "core/deployment/placement_id.h"
#include "core/model/table_spec.h"
#include "core/deployment/placement_id.h"

namespace engram {

Result<std::vector<int>> resolve_rank_hosts(const Deployment& d) {
  const int world = d.layout.world_size();
  const int host_count = static_cast<int>(d.hosts.size());
  std::vector<int> ranks_on_host(d.hosts.size(), 0);
  std::vector<int> map;
  if (d.rank_hosts.empty()) {
    int64_t gpus_total = 0;
    bool shared = false;
    for (const HostSpec& h : d.hosts) {
      gpus_total += rank_slots(h);
      shared |= h.ranks_per_gpu > 1;
    }
    // layout.extra_ranks take the slots after the Engram ranks'.
    const int64_t extra = d.layout.extra_ranks;
    if (gpus_total != world + extra) {
      return invalid_argument(fmt::format(
          "layout: tp * dp = {} * {} = {} rank{}{}, but the hosts give {} ({} host{}, {}); "
          "change tp/dp, the host count or gpus per host, or give rank_hosts explicitly",
          d.layout.tp, d.layout.dp, world, world == 1 ? "" : "s",
          extra == 0 ? "" : fmt::format(" and {} extra (layout.extra_ranks)", extra), gpus_total, host_count,
          host_count == 1 ? "" : "s", shared ? "ranks_per_gpu ranks per GPU" : "one rank per GPU"));
    }
    map.reserve(static_cast<size_t>(world));
    for (int h = 0; h < host_count && static_cast<int64_t>(map.size()) < world; ++h)
      for (int g = 0; g < rank_slots(d.hosts[static_cast<size_t>(h)]) && static_cast<int64_t>(map.size()) < world; ++g)
        map.push_back(h);
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
    if (ranks_on_host[static_cast<size_t>(h)] > rank_slots(host)) {
      return invalid_argument(fmt::format(
          "rank_hosts: {} ranks placed on host {} ('{}') but it has {} GPUs{}; move ranks or raise its gpus",
          ranks_on_host[static_cast<size_t>(h)], h, host.name, host.gpu_count,
          host.ranks_per_gpu > 1 ? fmt::format(" x ranks_per_gpu {}", host.ranks_per_gpu) : std::string()));
    }
  }
  return d.rank_hosts;
}

Status check_sequence_parallel(const EngramConfig& config, const ParallelLayout& layout) {
  if (!config.sequence_parallel || layout.tp > 1) return Status::ok();
  return invalid_argument(fmt::format(
      "config.sequence_parallel: true needs tp > 1, but layout.tp is {}: sequence parallelism splits a replica's "
      "tokens over its TP ranks, and one TP rank has nothing to split with; set sequence_parallel: false (or drop "
      "--sequence-parallel), or raise tp",
      layout.tp));
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
  ENGRAM_RETURN_IF_ERROR(check_prefill_cp(l));
  ENGRAM_RETURN_IF_ERROR(positive("config.tokens_per_rank_max", d.config.tokens_per_rank_max));
  if (d.config.tokens_per_rank_max > kMaxTokensPerRank) {
    return invalid_argument(fmt::format("config.tokens_per_rank_max: {} is more than {}, the largest DP slot a plan "
                                        "takes",
                                        d.config.tokens_per_rank_max, kMaxTokensPerRank));
  }
  ENGRAM_RETURN_IF_ERROR(check_sequence_parallel(d.config, l));
  if (!d.config.placement.empty()) {
    if (auto known = parse_placement(d.config.placement); !known.is_ok())
      return invalid_argument(fmt::format("config.{}; or leave it out for the rules' choice", known.status().message()));
  }
  if (static_cast<int64_t>(l.tp) * l.dp > kMaxRanks) {
    return invalid_argument(fmt::format("layout: tp * dp = {} * {} = {} ranks; a deployment holds at most {}", l.tp,
                                        l.dp, static_cast<int64_t>(l.tp) * l.dp, kMaxRanks));
  }
  if (l.world_size() % l.ep != 0) {
    return invalid_argument(fmt::format("layout.ep: {} does not divide the world of tp * dp = {} ranks; "
                                        "choose an ep that divides it", l.ep, l.world_size()));
  }
  if (d.hosts.empty()) return invalid_argument("hosts: no hosts given; describe at least one host");
  if (d.hosts.size() > static_cast<size_t>(kMaxHosts)) {
    return invalid_argument(fmt::format("hosts: {} hosts; a deployment holds at most {}", d.hosts.size(), kMaxHosts));
  }
  // Defaults are announced once per GPU model, however many hosts use them.
  std::map<std::string, int> gpu_memory_defaulted, host_memory_defaulted;
  // Each model as first found: a GPU file is read once, so the figures
  // reported below are the ones used (a file changed meanwhile cannot make
  // them disagree, or fail a second read).
  std::map<std::string, GpuModelInfo> models_found;
  std::vector<std::string> bare_shm_defaulted;  // bare hosts given the kernel's /dev/shm default
  for (size_t i = 0; i < d.hosts.size(); ++i) {
    HostSpec& h = d.hosts[i];
    if (h.name.empty()) return invalid_argument(fmt::format("hosts[{}].name: empty; give each host a name", i));
    for (const auto& [field, value] : {std::pair{"name", &h.name}, std::pair{"boot_id", &h.boot_id},
                                       std::pair{"gpu_model", &h.gpu_model}, std::pair{"nvlink_domain", &h.nvlink_domain}}) {
      if (value->size() > kMaxNameBytes) {
        return invalid_argument(fmt::format("hosts[{}].{}: '{}' is longer than {} bytes; use a shorter one", i, field,
                                            excerpt(*value), kMaxNameBytes));
      }
    }
    if (h.gpu_count < 1 || h.gpu_count > kMaxGpusPerHost) {
      return invalid_argument(fmt::format("hosts[{}].gpus: {} for host '{}'; a host has 1 to {} GPUs", i, h.gpu_count,
                                          h.name, kMaxGpusPerHost));
    }
    if (h.ranks_per_gpu < 1 || h.ranks_per_gpu > kMaxRanksPerGpu) {
      return invalid_argument(fmt::format("hosts[{}].ranks_per_gpu: {} for host '{}'; write 1 (a GPU per rank, the "
                                          "default) up to {} ranks sharing one GPU",
                                          i, h.ranks_per_gpu, h.name, kMaxRanksPerGpu));
    }
    if (h.gpu_memory_bytes > kMaxSizeBytes || h.tmpfs_bytes_total > kMaxSizeBytes ||
        h.host_memory_bytes > kMaxSizeBytes) {
      return invalid_argument(fmt::format(
          "hosts[{}]: gpu_memory, host_memory or shm_size of host '{}' is larger than 1 EiB", i, h.name));
    }
    if (h.tmpfs_bytes_used > h.tmpfs_bytes_total) {
      return invalid_argument(fmt::format("hosts[{}].shm_used: {} for host '{}', more than its /dev/shm total of {}; "
                                          "give at most shm_size",
                                          i, format_bytes(h.tmpfs_bytes_used), h.name, format_bytes(h.tmpfs_bytes_total)));
    }
    if (h.visible_gpus_per_rank < 0 || h.visible_gpus_per_rank > h.gpu_count) {
      return invalid_argument(fmt::format(
          "hosts[{}].visible_gpus_per_rank: {} for host '{}'; use 0 (all) up to its {} GPUs", i,
          h.visible_gpus_per_rank, h.name, h.gpu_count));
    }
    const auto seen = models_found.find(h.gpu_model);
    auto model = seen != models_found.end() ? Result<GpuModelInfo>(seen->second) : find_gpu_model(h.gpu_model);
    if (!model.is_ok()) {
      // find_gpu_model's own errors start "gpu_model: "; a GPU file's start with its path.
      const std::string& message = model.status().message();
      return invalid_argument(message.starts_with("gpu_model:") ? fmt::format("hosts[{}].{}", i, message)
                                                                 : fmt::format("hosts[{}].gpu_model: {}", i, message));
    }
    if (model->source_path.empty()) h.gpu_model = model->name;  // one spelling from here on (a GPU file keeps its path)
    models_found.try_emplace(h.gpu_model, *model);
    if (h.gpu_memory_bytes == 0) {
      h.gpu_memory_bytes = model->memory_bytes;
      ++gpu_memory_defaulted[h.gpu_model];
    }
    if (h.host_memory_bytes == 0) {
      const auto host_bytes = product_if_fits(model->host_memory_bytes_per_gpu, static_cast<uint64_t>(h.gpu_count));
      if (!host_bytes || *host_bytes > kMaxSizeBytes)
        return invalid_argument(fmt::format(
            "hosts[{}].host_memory: {} host_memory_per_gpu x {} GPUs of host '{}' is more than 1 EiB; give the "
            "host's host_memory, or a smaller host_memory_per_gpu in {}",
            i, format_size_short(model->host_memory_bytes_per_gpu), h.gpu_count, excerpt(h.name),
            model->source_path.empty() ? model->name : model->source_path));
      h.host_memory_bytes = *host_bytes;
      ++host_memory_defaulted[h.gpu_model];
    }
    if (h.environment == RuntimeEnvironment::kBareMetal && !h.shm_size_written && h.shm_mounted) {
      h.tmpfs_bytes_total = h.host_memory_bytes / 2;
      h.shm_size_written = true;  // said once, however often the deployment is validated
      bare_shm_defaulted.push_back(h.name);
    }
    if (h.boot_id.empty()) h.boot_id = "boot-" + h.name;  // one boot per named host by default
    if (!h.shm_mounted && h.tmpfs_bytes_total != 0) h.tmpfs_bytes_total = 0;  // nothing mounted, nothing there
  }
  // One machine listed twice would be counted twice (its GPUs, its RAM, its
  // tmpfs): a host's name and boot id say which machine it is.
  std::map<std::pair<std::string, std::string>, size_t> first_with_identity;
  for (size_t i = 0; i < d.hosts.size(); ++i) {
    const auto [it, fresh] = first_with_identity.try_emplace({d.hosts[i].name, d.hosts[i].boot_id}, i);
    if (fresh) continue;
    return invalid_argument(fmt::format(
        "hosts[{}] and hosts[{}] are both named '{}' (boot id '{}'): one machine listed twice? give each host its "
        "own name (two machines that share a hostname: give them different boot_id values)",
        it->second, i, excerpt(d.hosts[i].name), excerpt(d.hosts[i].boot_id)));
  }
  if (!bare_shm_defaulted.empty()) {
    d.defaults_used.push_back({fmt::format("shm_size ({})", join_limited(bare_shm_defaulted)), "half the host's RAM",
                               "a bare host's /dev/shm as the kernel mounts it (tmpfs's default size); give "
                               "shm_size (--shm-size: what `df -h /dev/shm` shows) where it was remounted"});
  }
  for (const auto& [name, hosts] : gpu_memory_defaulted) {
    const GpuModelInfo& m = models_found.at(name);
    d.defaults_used.push_back({fmt::format("gpu_memory ({} host{} of {})", hosts, hosts == 1 ? "" : "s", name),
                               format_gib(m.memory_bytes) + " per GPU",
                               fmt::format("{}; give gpu_memory (--gpu-memory) for another board", m.memory_source)});
  }
  for (const auto& [name, hosts] : host_memory_defaulted) {
    const GpuModelInfo& m = models_found.at(name);
    d.defaults_used.push_back({fmt::format("host_memory ({} host{} of {})", hosts, hosts == 1 ? "" : "s", name),
                               format_gib(m.host_memory_bytes_per_gpu) + " per GPU",
                               fmt::format("{}; give host_memory (--host-memory) for this host's RAM",
                                           m.host_memory_source)});
  }
  const double fraction = d.engine.gpu_memory_fraction;
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return invalid_argument(fmt::format("engine.gpu_memory_fraction: {} is outside (0, 1]; write the engine's "
                                        "fraction, e.g. 0.9 (vLLM's gpu_memory_utilization default)",
                                        fraction));
  }
  auto announced = [&](const char* field) {
    for (const DefaultUsed& u : d.defaults_used)
      if (u.field == field) return true;
    return false;
  };
  if (!d.engine.fraction_given && !announced("engine.gpu_memory_fraction")) {
    d.defaults_used.push_back({"engine.gpu_memory_fraction", fmt::format("{:.2f}", fraction),
                               "vLLM's default gpu_memory_utilization; give --gpu-memory-fraction (SGLang: "
                               "mem_fraction_static)"});
  }
  // Weights per GPU from the model file, where it gives them for this TP size.
  if (auto model = model_preset(d.model); !d.engine.gpu_reserved_bytes && model.is_ok()) {
    if (auto weights = model->serving.weights_bytes_per_gpu(d.layout.tp)) {
      d.engine.gpu_reserved_bytes = *weights;
      d.engine.reserved_from_model = true;
      d.defaults_used.push_back(
          {"engine.gpu_reserved", format_gib(*weights) + fmt::format(" (the model's weights per GPU at TP {})", d.layout.tp),
           fmt::format("the model file's serving.weights_per_gpu ({}); give --gpu-reserved to count the engine's "
                       "working memory too",
                       model->serving.source.empty() ? "no source given" : model->serving.source)});
    }
  }
  if (!d.engine.gpu_reserved_bytes && !announced("engine.gpu_reserved")) {
    d.defaults_used.push_back({"engine.gpu_reserved", "not counted",
                               "KV cache left counts no weights, activations, CUDA context or NCCL buffers; give "
                               "--gpu-reserved (the engine's weights per GPU plus its working memory)"});
  }
  ENGRAM_ASSIGN_OR_RETURN(d.rank_hosts, resolve_rank_hosts(d));
  return d;
}

}  // namespace engram
