#include "core/deployment_file/host_comparison.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/base/size_text.h"
#include "core/base/text_excerpt.h"
#include "core/base/text_list.h"
#include "core/model/gpu_models.h"

namespace engram {
namespace {

// Tolerances, each as a fraction of the real figure:
// - gpu_memory 1%: CUDA's total moves by tens of MiB between drivers and
//   with ECC, and files round it (plan prints 139.80 GiB); H100 80GB against
//   H100 NVL (94 GB) is 17%.
// - host_memory 5%: MemTotal is the installed RAM less what firmware and the
//   kernel keep back, a few percent of it.
// - shm_size 1%: `df -h` rounds up to two or three digits (94.4G shows as
//   95G), and a tmpfs size given as a percentage of RAM rounds to pages.
// - memory_limit_per_rank: one 4 KiB page, as the kernel rounds a cgroup's
//   limit.
constexpr double kGpuMemoryTolerance = 0.01;
constexpr double kHostMemoryTolerance = 0.05;
constexpr double kShmTolerance = 0.01;
constexpr uint64_t kPageBytes = 4096;

bool within(uint64_t file_bytes, uint64_t real_bytes, double fraction, uint64_t at_least_bytes = 0) {
  const uint64_t gap = file_bytes > real_bytes ? file_bytes - real_bytes : real_bytes - file_bytes;
  const double allowed = std::max(static_cast<double>(real_bytes) * fraction, static_cast<double>(at_least_bytes));
  return static_cast<double>(gap) <= allowed;
}

const char* yes_no(bool value) { return value ? "true" : "false"; }

class Comparer {
 public:
  Comparer(const WrittenHost& file, const ObservedHost& real)
      : file_(file), real_(real), where_(fmt::format("hosts[{}] '{}'", file.index, excerpt(file.spec.name))) {}

  void differ(std::string_view field, const std::string& file_value, const std::string& real_text) {
    out_.differences.push_back(fmt::format("{} {}: the file says {}, {}", where_, field, file_value, real_text));
  }
  void not_checked(std::string_view field, const std::string& why) {
    out_.not_checked.push_back(fmt::format("{} {}: not checked: {}", where_, field, why));
  }

  FactsComparison run() {
    gpus();
    shm();
    if (file_.states("imex_channel") && file_.spec.imex_channel != !real_.imex_channels.empty()) {
      differ("imex_channel", yes_no(file_.spec.imex_channel),
             real_.imex_channels.empty() ? "this host has no IMEX channel"
                                         : fmt::format("this host has IMEX channel(s) {}",
                                                       join_limited(real_.imex_channels)));
    }
    if (file_.states("host_memory")) {
      if (!real_.host_memory_bytes) {
        not_checked("host_memory", "MemTotal could not be read here");
      } else if (!within(file_.spec.host_memory_bytes, *real_.host_memory_bytes, kHostMemoryTolerance)) {
        differ("host_memory", format_size_short(file_.spec.host_memory_bytes),
               fmt::format("this host has {} (MemTotal)", format_size_short(*real_.host_memory_bytes)));
      }
    }
    if (file_.states("environment") && file_.spec.environment != RuntimeEnvironment::kUnknown &&
        file_.spec.environment != real_.environment) {
      differ("environment", runtime_environment_name(file_.spec.environment),
             fmt::format("this process runs in {} (detected; ENGRAMLAB_ENVIRONMENT overrides)",
                         runtime_environment_name(real_.environment)));
    }
    if (file_.states("memory_limit_per_rank")) {
      const uint64_t limit = file_.spec.memory_limit_bytes_per_rank.value_or(0);
      if (!real_.memory_limit_bytes) {
        differ("memory_limit_per_rank", format_size_short(limit), "no memory cgroup limits this process");
      } else if (!within(limit, *real_.memory_limit_bytes, 0, kPageBytes)) {
        differ("memory_limit_per_rank", format_size_short(limit),
               fmt::format("the memory cgroup {} limits this process to {}", real_.memory_limit_cgroup,
                           format_size_short(*real_.memory_limit_bytes)));
      }
    }
    // A container's limit holds all of its ranks; this process's cgroup may
    // be that container's, one rank's, or none (doctor run beside it): no
    // figure here says which, so it is named, not passed.
    if (file_.states("memory_limit")) {
      not_checked("memory_limit",
                  real_.memory_limit_bytes
                      ? fmt::format("a container's limit over its ranks; this process's memory cgroup {} limits it to "
                                    "{}, which may be one rank's",
                                    real_.memory_limit_cgroup, format_size_short(*real_.memory_limit_bytes))
                      : std::string("a container's limit over its ranks; no memory cgroup limits this process"));
    }
    if (file_.states("shm_size_limit"))
      not_checked("shm_size_limit", "a Kubernetes emptyDir sizeLimit is not visible from inside the pod");
    return std::move(out_);
  }

 private:
  void gpus() {
    static constexpr const char* kGpuFields[] = {"gpu_model", "gpu_memory", "fabric_attribute", "posix_fd_attribute",
                                                 "nvlink_domain", "visible_gpus_per_rank"};
    if (real_.gpu_count == 0) {
      std::vector<std::string> stated = {"gpus"};
      for (const char* field : kGpuFields)
        if (file_.states(field)) stated.emplace_back(field);
      not_checked(join_limited(stated, stated.size()),
                  fmt::format("no GPU is visible here ({})", real_.no_gpu_reason.empty() ? "none" : real_.no_gpu_reason));
      return;
    }
    // A rank in a container of its own sees the GPUs the file lets each rank see.
    const bool per_rank = file_.states("visible_gpus_per_rank") && file_.spec.visible_gpus_per_rank > 0;
    const int expected = per_rank ? file_.spec.visible_gpus_per_rank : file_.spec.gpu_count;
    if (expected != real_.gpu_count) {
      differ(per_rank ? "visible_gpus_per_rank" : "gpus", std::to_string(expected),
             fmt::format("this process sees {} GPU{} (CUDA_VISIBLE_DEVICES applies)", real_.gpu_count,
                         real_.gpu_count == 1 ? "" : "s"));
    }
    const ObservedGpu* gpu = first_readable_gpu(real_);
    if (gpu == nullptr) {
      const std::string why = real_.gpus.empty() ? "no GPU was opened" : real_.gpus.front().error;
      for (const char* field : kGpuFields)
        if (file_.states(field) && std::string_view(field) != "visible_gpus_per_rank")
          not_checked(field, fmt::format("the GPU could not be read: {}", why));
      return;
    }
    const std::string gpu_name = fmt::format("GPU {}", gpu->ordinal);
    const std::string real_model = gpu_model_of_device_name(gpu->device_name);
    if (file_.states("gpu_model")) {
      // A GPU file is compared by its name: field.
      auto model = find_gpu_model(file_.spec.gpu_model);
      if (!model.is_ok()) {
        not_checked("gpu_model", model.status().message());
      } else if (!same_gpu_model_name(model->name, real_model)) {
        differ("gpu_model", model->name, fmt::format("this host has {} ({})", real_model, gpu->device_name));
      }
    }
    if (file_.states("gpu_memory") &&
        !within(file_.spec.gpu_memory_bytes, gpu->memory_bytes_total, kGpuMemoryTolerance)) {
      differ("gpu_memory", format_size_short(file_.spec.gpu_memory_bytes),
             fmt::format("{} here has {} (CUDA's total)", gpu_name, format_size_short(gpu->memory_bytes_total)));
    }
    attribute("fabric_attribute", file_.spec.fabric_attribute, [](const ObservedGpu& g) { return g.fabric_attribute; },
              "FABRIC handle support");
    attribute("posix_fd_attribute", file_.spec.posix_fd_attribute, [](const ObservedGpu& g) { return g.posix_fd; },
              "POSIX fd handle support");
    // Presence only: the file's domain is a label, the real one NVML's
    // cluster id; nvlink_domain_differences compares the grouping.
    if (file_.states("nvlink_domain") && !file_.spec.nvlink_domain.empty() && gpu->nvlink_domain.empty()) {
      differ("nvlink_domain", excerpt(file_.spec.nvlink_domain),
             fmt::format("{} here is in no NVLink domain ({})", gpu_name, gpu->nvlink_domain_reason));
    }
  }

  template <typename Has>
  void attribute(const char* field, bool file_value, Has has, const char* what) {
    if (!file_.states(field)) return;
    for (const ObservedGpu& g : real_.gpus) {
      if (!g.error.empty() || has(g) == file_value) continue;
      differ(field, yes_no(file_value),
             fmt::format("GPU {} here reports {}{}", g.ordinal, has(g) ? "" : "no ", what));
      return;
    }
  }

  void shm() {
    if (!file_.states("shm_size")) return;
    const HostSpec& f = file_.spec;
    const std::string here = real_.shm_dir + " here";
    if (!f.shm_mounted) {
      if (real_.shm_mounted)
        differ("shm_size", "none", fmt::format("{} is a {} tmpfs", here, format_size_short(real_.shm_total_bytes)));
      return;
    }
    const std::string said = format_size_short(f.tmpfs_bytes_total);
    if (!real_.shm_mounted) {
      differ("shm_size", said,
             real_.shm_not_tmpfs.empty() ? here + " is not mounted"
                                         : fmt::format("{} is no tmpfs ({})", here, real_.shm_not_tmpfs));
    } else if (!within(f.tmpfs_bytes_total, real_.shm_total_bytes, kShmTolerance, kPageBytes)) {
      differ("shm_size", said, fmt::format("{} is {}", here, format_size_short(real_.shm_total_bytes)));
    }
  }

  const WrittenHost& file_;
  const ObservedHost& real_;
  std::string where_;
  FactsComparison out_;
};

std::vector<std::string> names_of(const Deployment& d) {
  std::vector<std::string> names;
  for (const HostSpec& h : d.hosts)
    if (std::find(names.begin(), names.end(), h.name) == names.end()) names.push_back(excerpt(h.name));
  return names;
}

}  // namespace

std::string HostMap::file_name_of(const std::string& real_hostname) const {
  for (const auto& [real, file] : real_to_file)
    if (real == real_hostname) return file;
  return real_hostname;
}

Result<HostMap> parse_host_map(std::string_view text) {
  HostMap map;
  if (text.empty()) return map;
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    const std::string_view item = text.substr(from, comma - from);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size() ||
        item.find('=', eq + 1) != std::string_view::npos) {
      return invalid_argument(fmt::format("--host-map: '{}' is not REAL=FILE; write the real hostname, '=', and the "
                                          "name the file gives that host, comma-separated: --host-map "
                                          "node17=h200-0,node18=h200-1",
                                          excerpt(item)));
    }
    const std::string real(item.substr(0, eq));
    if (std::any_of(map.real_to_file.begin(), map.real_to_file.end(), [&](const auto& p) { return p.first == real; }))
      return invalid_argument(fmt::format("--host-map: '{}' is mapped twice; map each real hostname once",
                                          excerpt(real)));
    map.real_to_file.emplace_back(real, std::string(item.substr(eq + 1)));
    from = comma + 1;
  }
  return map;
}

void FactsComparison::append(FactsComparison other) {
  for (std::string& d : other.differences) differences.push_back(std::move(d));
  for (std::string& n : other.not_checked) not_checked.push_back(std::move(n));
}

FactsComparison host_differences(const WrittenHost& file_host, const ObservedHost& real) {
  return Comparer(file_host, real).run();
}

Result<HostMatch> match_host(const DeploymentAsWritten& file, std::span<const int> rank_hosts, const HostMap& map,
                             int rank, const ObservedHost& real) {
  const Deployment& d = file.deployment;
  const std::string name = map.file_name_of(real.hostname);
  const auto named = std::find_if(d.hosts.begin(), d.hosts.end(), [&](const HostSpec& h) { return h.name == name; });
  HostMatch match;
  if (rank >= 0 && static_cast<size_t>(rank) < rank_hosts.size()) {
    const int planned = rank_hosts[static_cast<size_t>(rank)];
    const HostSpec& planned_host = d.hosts[static_cast<size_t>(planned)];
    if (planned_host.name == name) {
      match.host_index = planned;
      return match;
    }
    if (named != d.hosts.end()) {
      match.host_index = static_cast<int>(named - d.hosts.begin());
      match.differences.push_back(
          fmt::format("rank_hosts: the file places rank {} on hosts[{}] '{}', it runs on '{}'{}", rank, planned,
                      excerpt(planned_host.name), excerpt(real.hostname),
                      name == real.hostname ? std::string() : fmt::format(" (the file's '{}')", excerpt(name))));
      return match;
    }
  } else if (named != d.hosts.end()) {
    match.host_index = static_cast<int>(named - d.hosts.begin());
    return match;
  }
  const std::vector<std::string> names = names_of(d);
  return failed_precondition(fmt::format(
      "this host '{}'{} is not in {} (its hosts: {}); where the cluster's hostnames differ from the file's, map "
      "them: --host-map {}={}[,REAL=FILE...]",
      excerpt(real.hostname),
      name == real.hostname ? std::string() : fmt::format(" (mapped to '{}')", excerpt(name)), file.source,
      join_limited(names, 8), excerpt(real.hostname), names.empty() ? "NAME" : names.front()));
}

std::vector<std::string> nvlink_domain_differences(const DeploymentAsWritten& file,
                                                   std::span<const int> host_index_by_rank,
                                                   std::span<const ObservedHost> by_rank) {
  // The first host seen with each label, and with each real domain.
  struct Seen {
    int host_index;
    std::string other;  // its real domain (for a label), its label (for a domain)
  };
  std::map<std::string, Seen> by_label, by_domain;
  std::vector<std::string> out;
  std::vector<bool> reported(file.deployment.hosts.size(), false);
  for (size_t r = 0; r < by_rank.size() && r < host_index_by_rank.size(); ++r) {
    const int h = host_index_by_rank[r];
    if (h < 0 || reported[static_cast<size_t>(h)]) continue;
    const WrittenHost host = file.host(h);
    const ObservedGpu* gpu = first_readable_gpu(by_rank[r]);
    if (!host.states("nvlink_domain") || host.spec.nvlink_domain.empty() || gpu == nullptr ||
        gpu->nvlink_domain.empty())
      continue;
    const std::string& label = host.spec.nvlink_domain;
    const std::string& domain = gpu->nvlink_domain;
    const auto name = [&](int index) {
      return fmt::format("hosts[{}] '{}'", index, excerpt(file.deployment.hosts[static_cast<size_t>(index)].name));
    };
    const auto [label_it, new_label] = by_label.emplace(label, Seen{h, domain});
    const auto [domain_it, new_domain] = by_domain.emplace(domain, Seen{h, label});
    if (!new_label && label_it->second.other != domain) {
      out.push_back(fmt::format("{} and {} nvlink_domain: the file puts both in {}, here they are in {} and {}",
                                name(label_it->second.host_index), name(h), excerpt(label),
                                excerpt(label_it->second.other), excerpt(domain)));
      reported[static_cast<size_t>(h)] = true;
    } else if (!new_domain && domain_it->second.other != label) {
      out.push_back(fmt::format("{} and {} nvlink_domain: the file puts them in {} and {}, here both are in {}",
                                name(domain_it->second.host_index), name(h), excerpt(domain_it->second.other),
                                excerpt(label), excerpt(domain)));
      reported[static_cast<size_t>(h)] = true;
    }
  }
  return out;
}

}  // namespace engram
