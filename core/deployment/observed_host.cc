#include "core/deployment/observed_host.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "core/base/size_text.h"
#include "core/base/units.h"
#include "core/model/gpu_models.h"

namespace engram {
namespace {

// A size our parser reads back to exactly these bytes, in the largest
// binary unit that divides it ("190GiB", "24634372KiB").
std::string exact_size_text(uint64_t bytes) {
  if (bytes != 0 && bytes % kGiB == 0) return fmt::format("{}GiB", bytes / kGiB);
  if (bytes != 0 && bytes % kMiB == 0) return fmt::format("{}MiB", bytes / kMiB);
  if (bytes != 0 && bytes % kKiB == 0) return fmt::format("{}KiB", bytes / kKiB);
  return fmt::format("{}B", bytes);
}

void size_field(YAML::Emitter& out, const char* key, uint64_t bytes) {
  out << YAML::Key << key << YAML::Value << exact_size_text(bytes);
  if (bytes >= kGiB || bytes % kMiB != 0) out << YAML::Comment(format_size_short(bytes));
}

// Every GPU looked at that could be read has the attribute.
template <typename Attribute>
bool every_readable_gpu(const ObservedHost& host, Attribute attribute) {
  bool any = false;
  for (const ObservedGpu& g : host.gpus) {
    if (!g.error.empty()) continue;
    any = true;
    if (!attribute(g)) return false;
  }
  return any;
}

// The host's entry as one YAML map, in the order a person would write it.
void emit_entry(YAML::Emitter& out, const ClusterHost& host) {
  const ObservedHost& f = host.facts;
  const ObservedGpu* gpu = first_readable_gpu(f);
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << f.hostname;
  if (gpu == nullptr) {
    const int ranks = std::max<int>(1, static_cast<int>(host.ranks.size()));
    out << YAML::Key << "gpus" << YAML::Value << ranks;
    out << YAML::Comment(fmt::format("no GPU could be read here ({}): gpus counts this host's {}; write its GPUs "
                                     "and gpu_model",
                                     f.no_gpu_reason.empty() ? "none visible" : f.no_gpu_reason,
                                     ranks == 1 ? "one process" : fmt::format("{} ranks", ranks)));
  } else {
    out << YAML::Key << "gpus" << YAML::Value << host.gpu_count;
    if (host.one_gpu_per_rank) out << YAML::Key << "visible_gpus_per_rank" << YAML::Value << 1;
    const std::string model = gpu_model_of_device_name(gpu->device_name);
    if (is_builtin_gpu_model(model)) {
      out << YAML::Key << "gpu_model" << YAML::Value << model << YAML::Comment(gpu->device_name);
    } else {
      out << YAML::Comment(fmt::format("'{}' is no GPU model engramlab has: name a GPU file as gpu_model "
                                       "(core/model/gpu_models.h); gpu_memory is its CUDA total",
                                       gpu->device_name));
    }
    size_field(out, "gpu_memory", gpu->memory_bytes_total);
  }
  if (f.host_memory_bytes) size_field(out, "host_memory", *f.host_memory_bytes);
  if (f.shm_mounted) {
    size_field(out, "shm_size", f.shm_total_bytes);
  } else {
    out << YAML::Key << "shm_size" << YAML::Value << "none";
    if (!f.shm_not_tmpfs.empty()) out << YAML::Comment(f.shm_not_tmpfs);
  }
  if (gpu != nullptr && !gpu->nvlink_domain.empty())
    out << YAML::Key << "nvlink_domain" << YAML::Value << gpu->nvlink_domain;
  out << YAML::Key << "imex_channel" << YAML::Value << !f.imex_channels.empty();
  if (gpu != nullptr) {
    out << YAML::Key << "fabric_attribute" << YAML::Value
        << every_readable_gpu(f, [](const ObservedGpu& g) { return g.fabric_attribute; });
    out << YAML::Key << "posix_fd_attribute" << YAML::Value
        << every_readable_gpu(f, [](const ObservedGpu& g) { return g.posix_fd; });
  }
  if (f.environment != RuntimeEnvironment::kUnknown)
    out << YAML::Key << "environment" << YAML::Value << runtime_environment_name(f.environment);
  if (f.memory_limit_bytes) {
    // A cgroup may hold one rank or a whole container of them; only the
    // person who started them knows which, so it is said, not written.
    out << YAML::Comment(fmt::format("the memory cgroup {} limits this process to {} ({}): where each rank has its "
                                     "own, write memory_limit_per_rank: {}",
                                     f.memory_limit_cgroup, format_size_short(*f.memory_limit_bytes),
                                     exact_size_text(*f.memory_limit_bytes), exact_size_text(*f.memory_limit_bytes)));
  }
  out << YAML::EndMap;
}

// JSON field readers for observed_host_from_json: a wrong type is an error
// naming the field, never an exception.
class JsonReader {
 public:
  explicit JsonReader(const Json& j, std::string path) : j_(j), path_(std::move(path)) {}
  Status status() const { return error_.empty() ? Status::ok() : invalid_argument(error_); }

  void text(const char* key, std::string& out) {
    if (const Json* v = at(key, "a string"); v != nullptr) {
      if (v->is_string()) out = v->get<std::string>();
      else fail(key, "a string");
    }
  }
  void boolean(const char* key, bool& out) {
    if (const Json* v = at(key, "true or false"); v != nullptr) {
      if (v->is_boolean()) out = v->get<bool>();
      else fail(key, "true or false");
    }
  }
  void whole(const char* key, uint64_t& out) {
    if (const Json* v = at(key, "a whole number"); v != nullptr) {
      if (v->is_number_unsigned()) out = v->get<uint64_t>();
      else fail(key, "a whole number");
    }
  }
  void integer(const char* key, int& out) {
    if (const Json* v = at(key, "a number"); v != nullptr) {
      if (v->is_number_integer()) out = v->get<int>();
      else fail(key, "a number");
    }
  }
  void optional_whole(const char* key, std::optional<uint64_t>& out) {
    if (const Json* v = at(key, "a whole number or null"); v != nullptr) {
      if (v->is_null()) out.reset();
      else if (v->is_number_unsigned()) out = v->get<uint64_t>();
      else fail(key, "a whole number or null");
    }
  }
  void texts(const char* key, std::vector<std::string>& out) {
    if (const Json* v = at(key, "a list of strings"); v != nullptr) {
      out.clear();
      if (!v->is_array()) return fail(key, "a list of strings");
      for (const Json& item : *v) {
        if (!item.is_string()) return fail(key, "a list of strings");
        out.push_back(item.get<std::string>());
      }
    }
  }
  const Json* at(const char* key, const char* what) {
    if (!error_.empty()) return nullptr;
    if (!j_.is_object() || !j_.contains(key)) {
      fail(key, what);
      return nullptr;
    }
    return &j_[key];
  }
  void fail(const char* key, const char* what) {
    if (error_.empty()) error_ = fmt::format("host facts: {}{}: expected {}", path_, key, what);
  }

 private:
  const Json& j_;
  std::string path_;
  std::string error_;
};

}  // namespace

const ObservedGpu* first_readable_gpu(const ObservedHost& host) {
  for (const ObservedGpu& g : host.gpus)
    if (g.error.empty()) return &g;
  return nullptr;
}

std::vector<ClusterHost> cluster_hosts(std::span<const ObservedHost> by_rank) {
  std::vector<ClusterHost> hosts;
  std::vector<std::set<std::string>> bus_ids;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    const ObservedHost& facts = by_rank[r];
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const ClusterHost& h) {
      return h.facts.hostname == facts.hostname && h.facts.boot_id == facts.boot_id;
    });
    if (it == hosts.end()) {
      hosts.push_back(ClusterHost{facts, {}, 0, false});
      bus_ids.emplace_back();
      it = hosts.end() - 1;
    }
    it->ranks.push_back(static_cast<int>(r));
    it->gpu_count = std::max(it->gpu_count, facts.gpu_count);
    for (const ObservedGpu& g : facts.gpus)
      if (g.error.empty() && !g.bus_id.empty()) bus_ids[static_cast<size_t>(it - hosts.begin())].insert(g.bus_id);
  }
  for (size_t h = 0; h < hosts.size(); ++h) {
    // Every rank saw one GPU, and they were not all the same one: a
    // container (or CUDA_VISIBLE_DEVICES) per rank.
    const int distinct = static_cast<int>(bus_ids[h].size());
    if (hosts[h].gpu_count == 1 && distinct > 1) {
      hosts[h].gpu_count = distinct;
      hosts[h].one_gpu_per_rank = true;
    }
  }
  return hosts;
}

ClusterHost single_host(const ObservedHost& host) { return ClusterHost{host, {0}, host.gpu_count, false}; }

std::string host_entry_yaml(const ClusterHost& host) {
  YAML::Emitter out;
  out << YAML::BeginSeq;
  emit_entry(out, host);
  out << YAML::EndSeq;
  return out.c_str();
}

std::string cluster_hosts_yaml(std::span<const ClusterHost> hosts) {
  std::string text = "hosts:\n";
  for (const ClusterHost& h : hosts) {
    std::istringstream lines(host_entry_yaml(h));
    for (std::string line; std::getline(lines, line);) text += "  " + line + "\n";
  }
  return text;
}

Json observed_host_json(const ObservedHost& f) {
  Json j = Json::object();
  j["hostname"] = f.hostname;
  j["boot_id"] = f.boot_id;
  j["environment"] = runtime_environment_name(f.environment);
  j["shm_dir"] = f.shm_dir;
  j["shm_mounted"] = f.shm_mounted;
  j["shm_total_bytes"] = f.shm_total_bytes;
  j["shm_free_bytes"] = f.shm_free_bytes;
  j["shm_not_tmpfs"] = f.shm_not_tmpfs;
  j["imex_channels"] = f.imex_channels;
  j["host_memory_bytes"] = f.host_memory_bytes ? Json(*f.host_memory_bytes) : Json(nullptr);
  j["memory_limit_bytes"] = f.memory_limit_bytes ? Json(*f.memory_limit_bytes) : Json(nullptr);
  j["memory_limit_cgroup"] = f.memory_limit_cgroup;
  j["cuda_built"] = f.cuda_built;
  j["gpu_count"] = f.gpu_count;
  j["no_gpu_reason"] = f.no_gpu_reason;
  j["gpus"] = Json::array();
  for (const ObservedGpu& g : f.gpus) {
    j["gpus"].push_back({{"ordinal", g.ordinal},
                         {"device_name", g.device_name},
                         {"bus_id", g.bus_id},
                         {"memory_bytes_total", g.memory_bytes_total},
                         {"memory_bytes_free", g.memory_bytes_free},
                         {"granularity_bytes", g.granularity_bytes},
                         {"vmm", g.vmm},
                         {"posix_fd", g.posix_fd},
                         {"fabric_attribute", g.fabric_attribute},
                         {"fabric_probed", g.fabric_probed},
                         {"fabric_works", g.fabric_works},
                         {"fabric_error", g.fabric_error},
                         {"nvlink_domain", g.nvlink_domain},
                         {"nvlink_domain_reason", g.nvlink_domain_reason},
                         {"error", g.error}});
  }
  j["p2p_lines"] = f.p2p_lines;
  j["p2p_all"] = f.p2p_all;
  return j;
}

Result<ObservedHost> observed_host_from_json(const Json& j) {
  ObservedHost f;
  JsonReader r(j, "");
  r.text("hostname", f.hostname);
  r.text("boot_id", f.boot_id);
  std::string environment;
  r.text("environment", environment);
  r.text("shm_dir", f.shm_dir);
  r.boolean("shm_mounted", f.shm_mounted);
  r.whole("shm_total_bytes", f.shm_total_bytes);
  r.whole("shm_free_bytes", f.shm_free_bytes);
  r.text("shm_not_tmpfs", f.shm_not_tmpfs);
  r.texts("imex_channels", f.imex_channels);
  r.optional_whole("host_memory_bytes", f.host_memory_bytes);
  r.optional_whole("memory_limit_bytes", f.memory_limit_bytes);
  r.text("memory_limit_cgroup", f.memory_limit_cgroup);
  r.boolean("cuda_built", f.cuda_built);
  r.integer("gpu_count", f.gpu_count);
  r.text("no_gpu_reason", f.no_gpu_reason);
  r.texts("p2p_lines", f.p2p_lines);
  r.boolean("p2p_all", f.p2p_all);
  ENGRAM_RETURN_IF_ERROR(r.status());
  ENGRAM_ASSIGN_OR_RETURN(f.environment, parse_runtime_environment(environment, "host facts: environment"));
  const Json* gpus = r.at("gpus", "a list");
  if (gpus == nullptr || !gpus->is_array()) return invalid_argument("host facts: gpus: expected a list");
  for (size_t i = 0; i < gpus->size(); ++i) {
    ObservedGpu g;
    JsonReader gr((*gpus)[i], fmt::format("gpus[{}].", i));
    gr.integer("ordinal", g.ordinal);
    gr.text("device_name", g.device_name);
    gr.text("bus_id", g.bus_id);
    gr.whole("memory_bytes_total", g.memory_bytes_total);
    gr.whole("memory_bytes_free", g.memory_bytes_free);
    gr.whole("granularity_bytes", g.granularity_bytes);
    gr.boolean("vmm", g.vmm);
    gr.boolean("posix_fd", g.posix_fd);
    gr.boolean("fabric_attribute", g.fabric_attribute);
    gr.boolean("fabric_probed", g.fabric_probed);
    gr.boolean("fabric_works", g.fabric_works);
    gr.text("fabric_error", g.fabric_error);
    gr.text("nvlink_domain", g.nvlink_domain);
    gr.text("nvlink_domain_reason", g.nvlink_domain_reason);
    gr.text("error", g.error);
    ENGRAM_RETURN_IF_ERROR(gr.status());
    f.gpus.push_back(std::move(g));
  }
  return f;
}

}  // namespace engram
