#include "core/deployment_file/deployment_yaml.h"

#include "core/deployment/placement_id.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <vector>

#include "core/base/did_you_mean.h"
#include "core/base/field_errors.h"
#include "core/base/text_excerpt.h"
#include "core/base/text_list.h"
#include "core/base/units.h"
#include "core/deployment/shard_groups.h"
#include "core/engines/engine_profile.h"
#include "core/base/yaml_fields.h"
#include "core/deployment/model_yaml.h"
#include "core/model/gpu_models.h"

namespace engram {
namespace {

// The deployment's own value forms on top of the shared field reading.
class Parser : public YamlFields {
 public:
  using YamlFields::YamlFields;

  Status expect_map(const YAML::Node& node, std::string_view path) const {
    if (node.IsMap()) return Status::ok();
    return error(node, path, fmt::format("expected a map of fields, found {}", describe(node)));
  }

  Result<int> int_of(const YAML::Node& node, std::string_view path, int min_value, int max_value) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string text, this->text(node, path));
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < min_value || value > max_value) {
      return error(node, path, fmt::format("'{}' is not a whole number in [{}, {}]; write e.g. {}", excerpt(text),
                                           min_value, max_value, std::max(min_value, 1)));
    }
    return static_cast<int>(value);
  }

  Result<uint64_t> size_of(const YAML::Node& node, std::string_view path,
                           SizeUnits units = SizeUnits::kBinaryLetters) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string text, this->text(node, path));
    auto bytes = parse_bytes(text, path, units);
    if (!bytes.is_ok()) {
      // parse_bytes already names the field, the value and the fix.
      const YAML::Mark m = node.Mark();
      return invalid_argument(fmt::format("{}: line {}, column {}: {}", source(), m.line + 1, m.column + 1,
                                          bytes.status().message()));
    }
    return bytes.value();
  }
  // A memory size: 0 bytes is no memory at all, and leaving the field out is
  // how to ask for the model's figure, so an explicit 0 is refused.
  Result<uint64_t> memory_size_of(const YAML::Node& node, std::string_view path, std::string_view of) const {
    ENGRAM_ASSIGN_OR_RETURN(const uint64_t bytes, size_of(node, path));
    if (bytes == 0) {
      return error(node, path, fmt::format("'{}' is no memory; {} has some: give its size (e.g. 141GiB), or leave {} "
                                           "out for the GPU model's figure",
                                           excerpt(node.Scalar()), of, path));
    }
    return bytes;
  }
};

constexpr const char* kTopKeys[] = {"model", "hosts", "rank_hosts", "layout", "config", "engine", "timeouts"};
constexpr const char* kHostKeys[] = {"name", "boot_id", "gpus", "gpu_model", "gpu_memory", "host_memory", "shm_size",
                                     "nvlink_domain", "imex_channel", "fabric_attribute",
                                     "visible_gpus_per_rank", "count", "environment", "shm_size_limit",
                                     "memory_limit_per_rank", "cpu_sockets", "ranks_per_gpu",
                                     "posix_fd_attribute", "shm_used", "memory_limit", "pid_namespace"};
constexpr const char* kEngineKeys[] = {"name", "gpu_memory_fraction", "gpu_reserved", "context_length",
                                       "allow_negative_kv"};
constexpr const char* kTimeoutKeys[] = {"collective_ms", "join_ms"};
constexpr const char* kLayoutKeys[] = {"tp", "dp", "ep", "elastic_ep", "prefill_cp", "extra_ranks"};
constexpr const char* kConfigKeys[] = {"cpu_offload",         "peer_shards", "dp_shared_memory", "shard_group",
                                       "tokens_per_rank_max", "sequence_parallel", "placement", "embedding_across_dp",
                                       "thp_packing",         "host_layout"};

// A GPU model the plan knows, checked where the file names it, so a
// misspelt one is reported with the file's other errors. A path (a GPU
// file) is made absolute relative to the file that names it (as a model
// file is: the same deployment plans alike from any directory) and left to
// the plan.
Status check_gpu_model(const Parser& p, const YAML::Node& node, std::string_view path, std::string& name) {
  if (names_a_gpu_file(name)) {
    std::filesystem::path file(name);
    std::error_code ec;
    if (file.is_relative()) {
      const std::filesystem::path from = std::filesystem::path(p.source()).parent_path();
      if (!from.empty() && std::filesystem::is_directory(from, ec)) file = from / file;
    }
    const std::filesystem::path absolute = std::filesystem::absolute(file, ec);
    if (!ec) name = absolute.lexically_normal().string();
    return Status::ok();
  }
  if (find_gpu_model(name).is_ok()) return Status::ok();
  const std::vector<std::string> known = known_gpu_models();
  const std::string guess = did_you_mean(name, known);
  return p.error(node, path,
                 fmt::format("unknown GPU model '{}'; {}known: {} (any case)", excerpt(name),
                             guess.empty() ? "" : guess + " ", fmt::join(known, ", ")));
}

// One host entry's fields, each error kept and the next field read.
// A size in a Kubernetes field written with a letter alone (200G): taken the
// Kubernetes way and said in both units beside the defaults, in `read_as`.
void note_kubernetes_reading(const YAML::Node& node, const std::string& field, std::optional<uint64_t> bytes,
                             std::vector<DefaultUsed>& read_as) {
  if (!node || !node.IsScalar() || !bytes) return;
  if (auto reading = kubernetes_letter_reading(node.Scalar(), *bytes))
    read_as.push_back({field, *reading, "read as Kubernetes reads its quantities; write Gi for powers of 1024"});
}

void parse_host(const Parser& p, const YAML::Node& h, const std::string& path, HostSpec& host, FieldErrors& e,
                std::vector<DefaultUsed>& read_as) {
  host.tmpfs_bytes_total = kDockerDefaultShmBytes;
  if (!h["name"]) e.add(p.error(h, path + ".name", "missing; give each host a name"));
  else if (e.set(host.name, p.name(h["name"], path + ".name", kMaxNameBytes)) && host.name.empty())
    e.add(p.error(h["name"], path + ".name", "empty; give each host a name"));
  if (!h["gpus"]) e.add(p.error(h, path + ".gpus", "missing; give the number of GPUs, e.g. gpus: 8"));
  else e.set(host.gpu_count, p.int_of(h["gpus"], path + ".gpus", 1, kMaxGpusPerHost));
  if (h["boot_id"]) e.set(host.boot_id, p.name(h["boot_id"], path + ".boot_id", kMaxNameBytes));
  if (h["gpu_model"] && e.set(host.gpu_model, p.name(h["gpu_model"], path + ".gpu_model", kMaxNameBytes)))
    e.add(check_gpu_model(p, h["gpu_model"], path + ".gpu_model", host.gpu_model));
  if (h["gpu_memory"]) e.set(host.gpu_memory_bytes, p.memory_size_of(h["gpu_memory"], path + ".gpu_memory", "a GPU"));
  if (h["host_memory"])
    e.set(host.host_memory_bytes, p.memory_size_of(h["host_memory"], path + ".host_memory", "a host"));
  if (h["environment"]) {
    std::string text;
    if (e.set(text, p.text(h["environment"], path + ".environment"))) {
      auto environment = parse_runtime_environment(text, path + ".environment");
      if (environment.is_ok()) host.environment = environment.value();
      else
        e.add(p.error(h["environment"], path + ".environment",
                      fmt::format("'{}' is not a runtime environment; write bare_metal, docker, kubernetes or unknown",
                                  excerpt(text))));
    }
  }
  if (h["shm_size"]) {
    const YAML::Node& s = h["shm_size"];
    if (s.IsScalar() && s.Scalar() == "none") {
      host.shm_mounted = false;
      host.tmpfs_bytes_total = 0;
    } else {
      e.set(host.tmpfs_bytes_total, p.size_of(s, path + ".shm_size"));
    }
    host.shm_size_written = true;
  }
  if (h["nvlink_domain"]) e.set(host.nvlink_domain, p.name(h["nvlink_domain"], path + ".nvlink_domain", kMaxNameBytes));
  if (h["imex_channel"]) e.set(host.imex_channel, p.boolean(h["imex_channel"], path + ".imex_channel"));
  if (h["fabric_attribute"]) e.set(host.fabric_attribute, p.boolean(h["fabric_attribute"], path + ".fabric_attribute"));
  if (h["posix_fd_attribute"])
    e.set(host.posix_fd_attribute, p.boolean(h["posix_fd_attribute"], path + ".posix_fd_attribute"));
  if (h["visible_gpus_per_rank"]) {
    e.set(host.visible_gpus_per_rank,
          p.int_of(h["visible_gpus_per_rank"], path + ".visible_gpus_per_rank", 0, kMaxGpusPerHost));
  }
  if (h["shm_size_limit"]) e.set(host.tmpfs_bytes_enforced, p.size_of(h["shm_size_limit"], path + ".shm_size_limit", SizeUnits::kKubernetes));
  // A Kubernetes host's memory limits are what its pod spec says, in the
  // quantities Kubernetes reads (200G = 200 x 10^9, 200Gi = 200 x 2^30):
  // read any other way, 200G would "fit" where the pod is OOM-killed.
  const SizeUnits limit_units = memory_limit_units(host.environment);
  if (h["memory_limit_per_rank"]) {
    e.set(host.memory_limit_bytes_per_rank,
          p.size_of(h["memory_limit_per_rank"], path + ".memory_limit_per_rank", limit_units));
  }
  if (h["memory_limit"])
    e.set(host.memory_limit_bytes, p.size_of(h["memory_limit"], path + ".memory_limit", limit_units));
  if (limit_units == SizeUnits::kKubernetes) {
    note_kubernetes_reading(h["memory_limit"], path + ".memory_limit", host.memory_limit_bytes, read_as);
    note_kubernetes_reading(h["memory_limit_per_rank"], path + ".memory_limit_per_rank",
                            host.memory_limit_bytes_per_rank, read_as);
  }
  note_kubernetes_reading(h["shm_size_limit"], path + ".shm_size_limit", host.tmpfs_bytes_enforced, read_as);
  if (h["shm_used"]) e.set(host.tmpfs_bytes_used, p.size_of(h["shm_used"], path + ".shm_used"));
  if (h["cpu_sockets"]) e.set(host.cpu_sockets, p.int_of(h["cpu_sockets"], path + ".cpu_sockets", 1, 16));
  if (const YAML::Node n = h["pid_namespace"]) {
    std::string text;
    if (e.set(text, p.text(n, path + ".pid_namespace"))) {
      if (text == "shared") host.pid_namespaces = PidNamespaces::kShared;
      else if (text == "per_rank") host.pid_namespaces = PidNamespaces::kPerRank;
      else
        e.add(p.error(n, path + ".pid_namespace",
                      fmt::format("'{}' is not a PID namespace layout; write shared (one for the entry's ranks: a "
                                  "machine, --pid=host, shareProcessNamespace) or per_rank (a container per rank)",
                                  excerpt(text))));
    }
  }
  if (h["ranks_per_gpu"])
    e.set(host.ranks_per_gpu, p.int_of(h["ranks_per_gpu"], path + ".ranks_per_gpu", 1, kMaxRanksPerGpu));
}

void parse_hosts(const Parser& p, const YAML::Node& node, std::vector<HostSpec>& hosts,
                 std::vector<std::string>& shm_defaulted, std::vector<DefaultUsed>& read_as, FieldErrors& e) {
  if (!node.IsSequence()) {
    e.add(p.error(node, "hosts", fmt::format("expected a list of hosts, found {}", Parser::describe(node))));
    return;
  }
  if (node.size() > static_cast<size_t>(kMaxHosts)) {
    e.add(p.error(node, "hosts", fmt::format("{} entries; a deployment holds at most {} hosts", node.size(), kMaxHosts)));
    return;
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node& h = node[i];
    const std::string path = fmt::format("hosts[{}]", i);
    // An entry that is no map still counts as a host: rank_hosts indices
    // after it keep their meaning.
    HostSpec host;
    host.tmpfs_bytes_total = kDockerDefaultShmBytes;
    if (e.add(p.expect_map(h, path))) {
      e.add(p.check_keys(h, path, kHostKeys));
      parse_host(p, h, path, host, e, read_as);
      // A bare host's /dev/shm default is the kernel's (half the RAM), announced where the RAM is known.
      if (!h["shm_size"] && host.environment != RuntimeEnvironment::kBareMetal) shm_defaulted.push_back(host.name);
    }
    int count = 1;
    const bool counted = h.IsMap() && h["count"];
    if (counted) {
      if (!e.set(count, p.int_of(h["count"], path + ".count", 1, kMaxHosts))) return;  // no guess at how many
      // Checked before the copies are made: 1,000 entries of count 100000 stop here.
      if (hosts.size() + static_cast<size_t>(count) > static_cast<size_t>(kMaxHosts)) {
        e.add(p.error(h["count"], path + ".count",
                      fmt::format("{} more hosts make {} in all; a deployment holds at most {} hosts", count,
                                  hosts.size() + static_cast<size_t>(count), kMaxHosts)));
        return;
      }
    } else if (hosts.size() + 1 > static_cast<size_t>(kMaxHosts)) {
      e.add(p.error(h, path, fmt::format("a deployment holds at most {} hosts", kMaxHosts)));
      return;
    }
    if (!counted) {
      hosts.push_back(host);
      continue;
    }
    for (int c = 0; c < count; ++c) {
      HostSpec copy = host;
      copy.name = fmt::format("{}-{}", host.name, c);
      if (!host.boot_id.empty()) copy.boot_id = fmt::format("{}-{}", host.boot_id, c);
      hosts.push_back(std::move(copy));
    }
  }
}

// A plain number is a host index; anything else, and a number written in
// quotes, is a host name (hosts may well be named "0" and "1").
void parse_rank_hosts(const Parser& p, const YAML::Node& node, Deployment& d, FieldErrors& e) {
  if (!node.IsSequence()) {
    e.add(p.error(node, "rank_hosts",
                  fmt::format("expected a list of host indices or names, found {}", Parser::describe(node))));
    return;
  }
  if (node.size() > static_cast<size_t>(kMaxRanks)) {
    e.add(p.error(node, "rank_hosts",
                  fmt::format("{} entries; a deployment holds at most {} ranks", node.size(), kMaxRanks)));
    return;
  }
  for (size_t r = 0; r < node.size(); ++r) {
    const YAML::Node& n = node[r];
    const std::string path = fmt::format("rank_hosts[{}]", r);
    std::string text;
    if (!e.set(text, p.text(n, path))) continue;
    int64_t index = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
    const bool is_index = !Parser::is_quoted(n) && ec == std::errc() && end == text.data() + text.size();
    if (is_index) {
      if (index < 0 || index >= static_cast<int64_t>(d.hosts.size())) {
        e.add(p.error(n, path, fmt::format("host index {} is out of range; hosts are 0..{}", index,
                                           static_cast<int>(d.hosts.size()) - 1)));
        continue;
      }
    } else {
      auto matches = std::count_if(d.hosts.begin(), d.hosts.end(), [&](const HostSpec& h) { return h.name == text; });
      if (matches != 1) {
        e.add(p.error(n, path, fmt::format("'{}' names {} hosts; use a host index or a unique host name",
                                           excerpt(text), matches == 0 ? "no" : "several")));
        continue;
      }
      index = std::find_if(d.hosts.begin(), d.hosts.end(), [&](const HostSpec& h) { return h.name == text; }) -
              d.hosts.begin();
    }
    d.rank_hosts.push_back(static_cast<int>(index));
  }
}

// A section that must be a map, its keys checked; false when it is no map.
bool open_section(const Parser& p, const YAML::Node& node, const char* path, std::span<const char* const> keys,
                  FieldErrors& e) {
  if (!e.add(p.expect_map(node, path))) return false;
  e.add(p.check_keys(node, path, keys));
  return true;
}

void parse_layout(const Parser& p, const YAML::Node& node, ParallelLayout& l, FieldErrors& e) {
  if (!open_section(p, node, "layout", kLayoutKeys, e)) return;
  if (node["tp"]) e.set(l.tp, p.int_of(node["tp"], "layout.tp", 1, kMaxRanks));
  if (node["dp"]) e.set(l.dp, p.int_of(node["dp"], "layout.dp", 1, kMaxRanks));
  if (node["ep"]) e.set(l.ep, p.int_of(node["ep"], "layout.ep", 1, kMaxRanks));
  if (node["prefill_cp"]) e.set(l.prefill_cp, p.int_of(node["prefill_cp"], "layout.prefill_cp", 1, kMaxRanks));
  if (node["elastic_ep"]) e.set(l.elastic_ep, p.boolean(node["elastic_ep"], "layout.elastic_ep"));
  if (node["extra_ranks"]) e.set(l.extra_ranks, p.int_of(node["extra_ranks"], "layout.extra_ranks", 0, kMaxRanks));
}

void parse_engine(const Parser& p, const YAML::Node& node, EngineMemory& m, FieldErrors& e) {
  if (!open_section(p, node, "engine", kEngineKeys, e)) return;
  if (const YAML::Node n = node["name"]) {
    std::string text;
    if (e.set(text, p.text(n, "engine.name"))) {
      Result<EngineChoice> id = engram::parse_engine_choice(text, "engine.name");
      if (id.is_ok()) {
        m.profile = id->id;
        m.variant = id->variant;
      } else {
        e.add(p.error(n, "engine.name", std::string(id.status().message().substr(id.status().message().find(": ") + 2))));
      }
    }
  }
  if (const YAML::Node n = node["gpu_memory_fraction"]) {
    std::string text;
    if (e.set(text, p.text(n, "engine.gpu_memory_fraction"))) {
      auto fraction = parse_fraction(text, "engine.gpu_memory_fraction");
      if (fraction.is_ok()) {
        m.gpu_memory_fraction = fraction.value();
        m.fraction_given = true;
      } else {
        e.add(p.error(n, "engine.gpu_memory_fraction",
                      fmt::format("'{}' is not a fraction in (0, 1]; write e.g. 0.9", excerpt(text))));
      }
    }
  }
  if (node["gpu_reserved"]) e.set(m.gpu_reserved_bytes, p.size_of(node["gpu_reserved"], "engine.gpu_reserved"));
  if (node["allow_negative_kv"])
    e.set(m.negative_kv_allowed, p.boolean(node["allow_negative_kv"], "engine.allow_negative_kv"));
  int context_length = 0;
  if (node["context_length"] &&
      e.set(context_length, p.int_of(node["context_length"], "engine.context_length", 1, kMaxContextLength)))
    m.context_length_tokens = context_length;
}

void parse_config(const Parser& p, const YAML::Node& node, EngramConfig& c, FieldErrors& e) {
  if (!open_section(p, node, "config", kConfigKeys, e)) return;
  if (node["cpu_offload"] && e.set(c.cpu_offload, p.boolean(node["cpu_offload"], "config.cpu_offload")))
    c.cpu_offload_given = true;
  if (node["embedding_across_dp"])
    e.set(c.embedding_across_dp, p.boolean(node["embedding_across_dp"], "config.embedding_across_dp"));
  if (node["thp_packing"]) e.set(c.thp_packing, p.boolean(node["thp_packing"], "config.thp_packing"));
  if (node["host_layout"]) e.set(c.host_layout, p.text(node["host_layout"], "config.host_layout"));
  if (node["peer_shards"]) e.set(c.peer_shards, p.boolean(node["peer_shards"], "config.peer_shards"));
  if (const YAML::Node n = node["dp_shared_memory"]) {
    if (n.IsNull() || (n.IsScalar() && (n.Scalar() == "unset" || n.Scalar() == "~"))) {
      c.dp_shared_memory.reset();
    } else {
      auto value = p.boolean(n, "config.dp_shared_memory");
      if (value.is_ok()) c.dp_shared_memory = value.value();
      else
        e.add(p.error(n, "config.dp_shared_memory",
                      fmt::format("{} is not allowed; write true, false or unset", Parser::describe(n))));
    }
  }
  if (const YAML::Node n = node["shard_group"]) {
    std::string s;
    if (e.set(s, p.text(n, "config.shard_group"))) {
      const std::optional<ShardGroup> kind = shard_group_from_name(s);
      if (kind) c.shard_group = *kind;
      else
        e.add(p.error(n, "config.shard_group",
                      fmt::format("'{}' is not a shard group; write {}", excerpt(s), shard_group_choices())));
    }
  }
  if (node["sequence_parallel"]) e.set(c.sequence_parallel, p.boolean(node["sequence_parallel"], "config.sequence_parallel"));
  if (const YAML::Node n = node["placement"]) {
    std::string name;
    if (e.set(name, p.text(n, "config.placement"))) {
      // Checked here, where the line is known: the plan takes it as valid.
      if (auto known = parse_placement(name); known.is_ok()) {
        c.placement = name;
      } else {
        std::string why = known.status().message();  // "placement: unknown placement ...": the field is named below
        if (why.rfind("placement: ", 0) == 0) why.erase(0, 11);
        e.add(p.error(n, "config.placement", fmt::format("{}; or leave config.placement out for the rules' choice", why)));
      }
    }
  }
  if (node["tokens_per_rank_max"]) {
    e.set(c.tokens_per_rank_max,
          p.int_of(node["tokens_per_rank_max"], "config.tokens_per_rank_max", 1, kMaxTokensPerRank));
  }
}

constexpr int kMaxTimeoutMs = 24 * 3600 * 1000;

void parse_timeouts(const Parser& p, const YAML::Node& node, Timeouts& t, FieldErrors& e) {
  if (!open_section(p, node, "timeouts", kTimeoutKeys, e)) return;
  int ms = 0;
  if (node["collective_ms"] && e.set(ms, p.int_of(node["collective_ms"], "timeouts.collective_ms", 1, kMaxTimeoutMs)))
    t.collective_ms = static_cast<uint64_t>(ms);
  if (node["join_ms"] && e.set(ms, p.int_of(node["join_ms"], "timeouts.join_ms", 1, kMaxTimeoutMs)))
    t.join_ms = static_cast<uint64_t>(ms);
}

}  // namespace

Deployment parse_deployment_fields(const YAML::Node& node, std::string_view source_name,
                                   std::span<const std::string> ignored_keys, FieldErrors& e) {
  Parser p(source_name);
  Deployment d;
  if (!node.IsMap()) {
    e.add(p.error(node, "(top level)", fmt::format("expected a map with model, hosts, layout and config, found {}",
                                                   Parser::describe(node))));
    return d;
  }
  e.add(p.check_keys(node, "", kTopKeys, ignored_keys));
  if (node["model"]) e.add(parse_model_field(p, node["model"], "model", d.model, d.model_hash));
  std::vector<std::string> shm_defaulted;
  std::vector<DefaultUsed> read_as;
  if (!node["hosts"]) e.add(p.error(node, "hosts", "missing; list the hosts, e.g. hosts: [{name: n0, gpus: 8}]"));
  else parse_hosts(p, node["hosts"], d.hosts, shm_defaulted, read_as, e);
  d.defaults_used.insert(d.defaults_used.end(), read_as.begin(), read_as.end());
  if (!shm_defaulted.empty()) {
    d.defaults_used.push_back({fmt::format("shm_size ({})", join_limited(shm_defaulted)), "64 MiB",
                               "Docker's default /dev/shm; give shm_size (what `df -h /dev/shm` shows there)"});
  }
  if (node["rank_hosts"]) parse_rank_hosts(p, node["rank_hosts"], d, e);
  if (node["layout"]) parse_layout(p, node["layout"], d.layout, e);
  if (node["config"]) parse_config(p, node["config"], d.config, e);
  if (node["engine"]) parse_engine(p, node["engine"], d.engine, e);
  if (node["timeouts"]) parse_timeouts(p, node["timeouts"], d.timeouts, e);
  return d;
}

Result<Deployment> parse_deployment(const YAML::Node& node, std::string_view source_name,
                                    std::span<const std::string> ignored_keys) {
  FieldErrors errors;
  Deployment d = parse_deployment_fields(node, source_name, ignored_keys, errors);
  if (!errors.empty()) return errors.status();
  return d;
}

Result<Deployment> parse_deployment(const YAML::Node& node, std::string_view source_name) {
  return parse_deployment(node, source_name, std::span<const std::string>{});
}

Result<Deployment> parse_deployment_text(std::string_view text, std::string_view source_name) {
  ENGRAM_ASSIGN_OR_RETURN(YAML::Node root, load_yaml_text(text, source_name));
  return parse_deployment(root, source_name);
}

Result<Deployment> load_deployment_file(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "--file"));
  return parse_deployment_text(text, path);
}

}  // namespace engram
