#include "core/deployment/observed_host.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
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

// Every field of the facts, named once: the JSON writer and reader both
// visit this list, so the two cannot drift apart.
template <typename Gpu, typename Visit>
void gpu_fields(Gpu& g, Visit&& v) {
  v("ordinal", g.ordinal);
  v("device_name", g.device_name);
  v("bus_id", g.bus_id);
  v("memory_bytes_total", g.memory_bytes_total);
  v("memory_bytes_free", g.memory_bytes_free);
  v("granularity_bytes", g.granularity_bytes);
  v("vmm", g.vmm);
  v("posix_fd", g.posix_fd);
  v("fabric_attribute", g.fabric_attribute);
  v("fabric_probed", g.fabric_probed);
  v("fabric_works", g.fabric_works);
  v("fabric_error", g.fabric_error);
  v("nvlink_domain", g.nvlink_domain);
  v("nvlink_domain_reason", g.nvlink_domain_reason);
  v("error", g.error);
}

template <typename Host, typename Visit>
void host_fields(Host& f, Visit&& v) {
  v("hostname", f.hostname);
  v("boot_id", f.boot_id);
  v("environment", f.environment);
  v("shm_dir", f.shm_dir);
  v("shm_mounted", f.shm_mounted);
  v("shm_total_bytes", f.shm_total_bytes);
  v("shm_free_bytes", f.shm_free_bytes);
  v("shm_not_tmpfs", f.shm_not_tmpfs);
  v("imex_channels", f.imex_channels);
  v("host_memory_bytes", f.host_memory_bytes);
  v("memory_limit_bytes", f.memory_limit_bytes);
  v("memory_limit_cgroup", f.memory_limit_cgroup);
  v("cuda_built", f.cuda_built);
  v("gpu_count", f.gpu_count);
  v("no_gpu_reason", f.no_gpu_reason);
  v("gpus", f.gpus);
  v("p2p_lines", f.p2p_lines);
  v("p2p_all", f.p2p_all);
}

struct JsonWriter {
  Json& j;
  template <typename T>
  void operator()(const char* key, const T& value) { j[key] = value; }
  void operator()(const char* key, const std::optional<uint64_t>& value) {
    j[key] = value ? Json(*value) : Json(nullptr);
  }
  void operator()(const char* key, RuntimeEnvironment value) { j[key] = runtime_environment_name(value); }
  void operator()(const char* key, const std::vector<ObservedGpu>& gpus) {
    j[key] = Json::array();
    for (const ObservedGpu& g : gpus) {
      Json item = Json::object();
      gpu_fields(g, JsonWriter{item});
      j[key].push_back(std::move(item));
    }
  }
};

// Reads what JsonWriter wrote: a missing field or a wrong type is an error
// naming it, never an exception.
class JsonReader {
 public:
  JsonReader(const Json& j, std::string path) : j_(j), path_(std::move(path)) {}
  Status status() const { return error_.empty() ? Status::ok() : invalid_argument(error_); }

  void operator()(const char* key, std::string& out) {
    if (const Json* v = at(key, "a string", &Json::is_string)) out = v->get<std::string>();
  }
  void operator()(const char* key, bool& out) {
    if (const Json* v = at(key, "true or false", &Json::is_boolean)) out = v->get<bool>();
  }
  void operator()(const char* key, uint64_t& out) {
    if (const Json* v = at(key, "a whole number", &Json::is_number_unsigned)) out = v->get<uint64_t>();
  }
  void operator()(const char* key, int& out) {
    if (const Json* v = at(key, "a number", &Json::is_number_integer)) out = v->get<int>();
  }
  void operator()(const char* key, std::optional<uint64_t>& out) {
    const auto is_size = [](const Json& x) { return x.is_null() || x.is_number_unsigned(); };
    const Json* v = at(key, "a whole number or null", is_size);
    if (v != nullptr) out = v->is_null() ? std::nullopt : std::optional<uint64_t>(v->get<uint64_t>());
  }
  void operator()(const char* key, RuntimeEnvironment& out) {
    std::string name;
    (*this)(key, name);
    if (!error_.empty()) return;
    auto parsed = parse_runtime_environment(name, path_ + key);
    if (parsed.is_ok()) out = *parsed;
    else error_ = fmt::format("host facts: {}", parsed.status().message());
  }
  void operator()(const char* key, std::vector<std::string>& out) {
    const auto is_texts = [](const Json& x) {
      return x.is_array() && std::all_of(x.begin(), x.end(), [](const Json& i) { return i.is_string(); });
    };
    if (const Json* v = at(key, "a list of strings", is_texts)) out = v->get<std::vector<std::string>>();
  }
  void operator()(const char* key, std::vector<ObservedGpu>& out) {
    const Json* v = at(key, "a list", &Json::is_array);
    if (v == nullptr) return;
    out.clear();
    for (size_t i = 0; i < v->size() && error_.empty(); ++i) {
      ObservedGpu g;
      JsonReader item((*v)[i], fmt::format("{}{}[{}].", path_, key, i));
      gpu_fields(g, item);
      error_ = item.error_;
      out.push_back(std::move(g));
    }
  }

 private:
  template <typename Is>
  const Json* at(const char* key, const char* what, Is is) {
    if (!error_.empty()) return nullptr;
    if (j_.is_object() && j_.contains(key)) {
      const Json& v = j_[key];
      if (std::invoke(is, v)) return &v;
    }
    error_ = fmt::format("host facts: {}{}: expected {}", path_, key, what);
    return nullptr;
  }

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
  host_fields(f, JsonWriter{j});
  return j;
}

Result<ObservedHost> observed_host_from_json(const Json& j) {
  ObservedHost f;
  JsonReader reader(j, "");
  host_fields(f, reader);
  ENGRAM_RETURN_IF_ERROR(reader.status());
  return f;
}

}  // namespace engram
