#include "core/deployment/deployment_yaml.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <vector>

#include "core/base/text_excerpt.h"
#include "core/base/text_list.h"
#include "core/base/units.h"
#include "core/deployment/shard_groups.h"
#include "core/base/yaml_fields.h"
#include "core/deployment/model_yaml.h"

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

  Result<uint64_t> size_of(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string text, this->text(node, path));
    auto bytes = parse_bytes(text, path);
    if (!bytes.is_ok()) {
      // parse_bytes already names the field, the value and the fix.
      const YAML::Mark m = node.Mark();
      return invalid_argument(fmt::format("{}: line {}, column {}: {}", source(), m.line + 1, m.column + 1,
                                          bytes.status().message()));
    }
    return bytes.value();
  }
};

constexpr const char* kTopKeys[] = {"model", "hosts", "rank_hosts", "layout", "config", "engine", "timeouts"};
constexpr const char* kHostKeys[] = {"name", "boot_id", "gpus", "gpu_model", "gpu_memory", "host_memory", "shm_size",
                                     "nvlink_domain", "imex_channel", "fabric_attribute",
                                     "visible_gpus_per_rank", "count", "environment", "shm_size_limit",
                                     "memory_limit_per_rank", "cpu_sockets"};
constexpr const char* kEngineKeys[] = {"gpu_memory_fraction", "gpu_reserved"};
constexpr const char* kTimeoutKeys[] = {"collective_ms", "join_ms"};
constexpr const char* kLayoutKeys[] = {"tp", "dp", "ep", "elastic_ep", "prefill_cp"};
constexpr const char* kConfigKeys[] = {"cpu_offload", "peer_shards", "dp_shared_memory", "shard_group",
                                       "tokens_per_rank_max", "sequence_parallel"};

Status parse_hosts(const Parser& p, const YAML::Node& node, std::vector<HostSpec>& hosts,
                   std::vector<std::string>& shm_defaulted) {
  if (!node.IsSequence()) {
    return p.error(node, "hosts", fmt::format("expected a list of hosts, found {}", Parser::describe(node)));
  }
  if (node.size() > static_cast<size_t>(kMaxHosts)) {
    return p.error(node, "hosts", fmt::format("{} entries; a deployment holds at most {} hosts", node.size(), kMaxHosts));
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node& h = node[i];
    const std::string path = fmt::format("hosts[{}]", i);
    ENGRAM_RETURN_IF_ERROR(p.expect_map(h, path));
    ENGRAM_RETURN_IF_ERROR(p.check_keys(h, path, kHostKeys));
    HostSpec host;
    host.tmpfs_bytes_total = kDockerDefaultShmBytes;
    if (!h["name"]) return p.error(h, path + ".name", "missing; give each host a name");
    ENGRAM_ASSIGN_OR_RETURN(host.name, p.name(h["name"], path + ".name", kMaxNameBytes));
    if (host.name.empty()) return p.error(h["name"], path + ".name", "empty; give each host a name");
    if (!h["gpus"]) return p.error(h, path + ".gpus", "missing; give the number of GPUs, e.g. gpus: 8");
    ENGRAM_ASSIGN_OR_RETURN(host.gpu_count, p.int_of(h["gpus"], path + ".gpus", 1, kMaxGpusPerHost));
    if (h["boot_id"]) { ENGRAM_ASSIGN_OR_RETURN(host.boot_id, p.name(h["boot_id"], path + ".boot_id", kMaxNameBytes)); }
    if (h["gpu_model"]) { ENGRAM_ASSIGN_OR_RETURN(host.gpu_model, p.name(h["gpu_model"], path + ".gpu_model", kMaxNameBytes)); }
    if (h["gpu_memory"]) { ENGRAM_ASSIGN_OR_RETURN(host.gpu_memory_bytes, p.size_of(h["gpu_memory"], path + ".gpu_memory")); }
    if (h["host_memory"]) {
      ENGRAM_ASSIGN_OR_RETURN(host.host_memory_bytes, p.size_of(h["host_memory"], path + ".host_memory"));
    }
    if (h["environment"]) {
      ENGRAM_ASSIGN_OR_RETURN(std::string text, p.text(h["environment"], path + ".environment"));
      auto environment = parse_runtime_environment(text, path + ".environment");
      if (!environment.is_ok()) {
        return p.error(h["environment"], path + ".environment",
                       fmt::format("'{}' is not a runtime environment; write bare_metal, docker, kubernetes or unknown",
                                   excerpt(text)));
      }
      host.environment = environment.value();
    }
    if (!h["shm_size"]) shm_defaulted.push_back(host.name);
    if (h["shm_size"]) {
      const YAML::Node& s = h["shm_size"];
      if (s.IsScalar() && s.Scalar() == "none") {
        host.shm_mounted = false;
        host.tmpfs_bytes_total = 0;
      } else {
        ENGRAM_ASSIGN_OR_RETURN(host.tmpfs_bytes_total, p.size_of(s, path + ".shm_size"));
      }
    }
    if (h["nvlink_domain"]) { ENGRAM_ASSIGN_OR_RETURN(host.nvlink_domain, p.name(h["nvlink_domain"], path + ".nvlink_domain", kMaxNameBytes)); }
    if (h["imex_channel"]) { ENGRAM_ASSIGN_OR_RETURN(host.imex_channel, p.boolean(h["imex_channel"], path + ".imex_channel")); }
    if (h["fabric_attribute"]) { ENGRAM_ASSIGN_OR_RETURN(host.fabric_attribute, p.boolean(h["fabric_attribute"], path + ".fabric_attribute")); }
    if (h["visible_gpus_per_rank"]) {
      ENGRAM_ASSIGN_OR_RETURN(host.visible_gpus_per_rank,
                              p.int_of(h["visible_gpus_per_rank"], path + ".visible_gpus_per_rank", 0, kMaxGpusPerHost));
    }
    if (h["shm_size_limit"]) {
      ENGRAM_ASSIGN_OR_RETURN(host.tmpfs_bytes_enforced, p.size_of(h["shm_size_limit"], path + ".shm_size_limit"));
    }
    if (h["memory_limit_per_rank"]) {
      ENGRAM_ASSIGN_OR_RETURN(host.memory_limit_bytes_per_rank,
                              p.size_of(h["memory_limit_per_rank"], path + ".memory_limit_per_rank"));
    }
    if (h["cpu_sockets"]) {
      ENGRAM_ASSIGN_OR_RETURN(host.cpu_sockets, p.int_of(h["cpu_sockets"], path + ".cpu_sockets", 1, 16));
    }
    int count = 1;
    if (h["count"]) {
      ENGRAM_ASSIGN_OR_RETURN(count, p.int_of(h["count"], path + ".count", 1, kMaxHosts));
      // Checked before the copies are made: 1,000 entries of count 100000 stop here.
      if (hosts.size() + static_cast<size_t>(count) > static_cast<size_t>(kMaxHosts)) {
        return p.error(h["count"], path + ".count",
                       fmt::format("{} more hosts make {} in all; a deployment holds at most {} hosts", count,
                                   hosts.size() + static_cast<size_t>(count), kMaxHosts));
      }
    } else if (hosts.size() + 1 > static_cast<size_t>(kMaxHosts)) {
      return p.error(h, path, fmt::format("a deployment holds at most {} hosts", kMaxHosts));
    }
    if (!h["count"]) {
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
  return Status::ok();
}

// A plain number is a host index; anything else, and a number written in
// quotes, is a host name (hosts may well be named "0" and "1").
Status parse_rank_hosts(const Parser& p, const YAML::Node& node, Deployment& d) {
  if (!node.IsSequence()) {
    return p.error(node, "rank_hosts", fmt::format("expected a list of host indices or names, found {}",
                                                   Parser::describe(node)));
  }
  if (node.size() > static_cast<size_t>(kMaxRanks)) {
    return p.error(node, "rank_hosts", fmt::format("{} entries; a deployment holds at most {} ranks", node.size(),
                                                   kMaxRanks));
  }
  for (size_t r = 0; r < node.size(); ++r) {
    const YAML::Node& e = node[r];
    const std::string path = fmt::format("rank_hosts[{}]", r);
    ENGRAM_ASSIGN_OR_RETURN(std::string text, p.text(e, path));
    int64_t index = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
    const bool is_index = !Parser::is_quoted(e) && ec == std::errc() && end == text.data() + text.size();
    if (is_index) {
      if (index < 0 || index >= static_cast<int64_t>(d.hosts.size())) {
        return p.error(e, path, fmt::format("host index {} is out of range; hosts are 0..{}", index,
                                            static_cast<int>(d.hosts.size()) - 1));
      }
    } else {
      auto matches = std::count_if(d.hosts.begin(), d.hosts.end(), [&](const HostSpec& h) { return h.name == text; });
      if (matches != 1) {
        return p.error(e, path, fmt::format("'{}' names {} hosts; use a host index or a unique host name",
                                            excerpt(text), matches == 0 ? "no" : "several"));
      }
      index = std::find_if(d.hosts.begin(), d.hosts.end(), [&](const HostSpec& h) { return h.name == text; }) -
              d.hosts.begin();
    }
    d.rank_hosts.push_back(static_cast<int>(index));
  }
  return Status::ok();
}

Status parse_layout(const Parser& p, const YAML::Node& node, ParallelLayout& l) {
  ENGRAM_RETURN_IF_ERROR(p.expect_map(node, "layout"));
  ENGRAM_RETURN_IF_ERROR(p.check_keys(node, "layout", kLayoutKeys));
  if (node["tp"]) { ENGRAM_ASSIGN_OR_RETURN(l.tp, p.int_of(node["tp"], "layout.tp", 1, kMaxRanks)); }
  if (node["dp"]) { ENGRAM_ASSIGN_OR_RETURN(l.dp, p.int_of(node["dp"], "layout.dp", 1, kMaxRanks)); }
  if (node["ep"]) { ENGRAM_ASSIGN_OR_RETURN(l.ep, p.int_of(node["ep"], "layout.ep", 1, kMaxRanks)); }
  if (node["prefill_cp"]) { ENGRAM_ASSIGN_OR_RETURN(l.prefill_cp, p.int_of(node["prefill_cp"], "layout.prefill_cp", 1, kMaxRanks)); }
  if (node["elastic_ep"]) { ENGRAM_ASSIGN_OR_RETURN(l.elastic_ep, p.boolean(node["elastic_ep"], "layout.elastic_ep")); }
  return Status::ok();
}

Status parse_engine(const Parser& p, const YAML::Node& node, EngineMemory& e) {
  ENGRAM_RETURN_IF_ERROR(p.expect_map(node, "engine"));
  ENGRAM_RETURN_IF_ERROR(p.check_keys(node, "engine", kEngineKeys));
  if (node["gpu_memory_fraction"]) {
    const YAML::Node& n = node["gpu_memory_fraction"];
    ENGRAM_ASSIGN_OR_RETURN(std::string text, p.text(n, "engine.gpu_memory_fraction"));
    auto fraction = parse_fraction(text, "engine.gpu_memory_fraction");
    if (!fraction.is_ok()) {
      return p.error(n, "engine.gpu_memory_fraction",
                     fmt::format("'{}' is not a fraction in (0, 1]; write e.g. 0.9", excerpt(text)));
    }
    e.gpu_memory_fraction = fraction.value();
    e.fraction_given = true;
  }
  if (node["gpu_reserved"]) {
    ENGRAM_ASSIGN_OR_RETURN(uint64_t bytes, p.size_of(node["gpu_reserved"], "engine.gpu_reserved"));
    e.gpu_reserved_bytes = bytes;
  }
  return Status::ok();
}

Status parse_config(const Parser& p, const YAML::Node& node, EngramConfig& c) {
  ENGRAM_RETURN_IF_ERROR(p.expect_map(node, "config"));
  ENGRAM_RETURN_IF_ERROR(p.check_keys(node, "config", kConfigKeys));
  if (node["cpu_offload"]) { ENGRAM_ASSIGN_OR_RETURN(c.cpu_offload, p.boolean(node["cpu_offload"], "config.cpu_offload")); }
  if (node["peer_shards"]) { ENGRAM_ASSIGN_OR_RETURN(c.peer_shards, p.boolean(node["peer_shards"], "config.peer_shards")); }
  if (node["dp_shared_memory"]) {
    const YAML::Node& n = node["dp_shared_memory"];
    if (n.IsNull() || (n.IsScalar() && (n.Scalar() == "unset" || n.Scalar() == "~"))) {
      c.dp_shared_memory.reset();
    } else {
      auto value = p.boolean(n, "config.dp_shared_memory");
      if (!value.is_ok()) {
        return p.error(n, "config.dp_shared_memory",
                       fmt::format("{} is not allowed; write true, false or unset", Parser::describe(n)));
      }
      c.dp_shared_memory = value.value();
    }
  }
  if (node["shard_group"]) {
    ENGRAM_ASSIGN_OR_RETURN(std::string s, p.text(node["shard_group"], "config.shard_group"));
    const std::optional<ShardGroup> kind = shard_group_from_name(s);
    if (!kind)
      return p.error(node["shard_group"], "config.shard_group",
                     fmt::format("'{}' is not a shard group; write {}", excerpt(s), shard_group_choices()));
    c.shard_group = *kind;
  }
  if (node["sequence_parallel"]) {
    ENGRAM_ASSIGN_OR_RETURN(c.sequence_parallel, p.boolean(node["sequence_parallel"], "config.sequence_parallel"));
  }
  if (node["tokens_per_rank_max"]) {
    ENGRAM_ASSIGN_OR_RETURN(c.tokens_per_rank_max,
                            p.int_of(node["tokens_per_rank_max"], "config.tokens_per_rank_max", 1, kMaxTokensPerRank));
  }
  return Status::ok();
}

constexpr int kMaxTimeoutMs = 24 * 3600 * 1000;

Status parse_timeouts(const Parser& p, const YAML::Node& node, Timeouts& t) {
  ENGRAM_RETURN_IF_ERROR(p.expect_map(node, "timeouts"));
  ENGRAM_RETURN_IF_ERROR(p.check_keys(node, "timeouts", kTimeoutKeys));
  if (node["collective_ms"]) {
    ENGRAM_ASSIGN_OR_RETURN(int ms, p.int_of(node["collective_ms"], "timeouts.collective_ms", 1, kMaxTimeoutMs));
    t.collective_ms = static_cast<uint64_t>(ms);
  }
  if (node["join_ms"]) {
    ENGRAM_ASSIGN_OR_RETURN(int ms, p.int_of(node["join_ms"], "timeouts.join_ms", 1, kMaxTimeoutMs));
    t.join_ms = static_cast<uint64_t>(ms);
  }
  return Status::ok();
}

}  // namespace

Result<Deployment> parse_deployment(const YAML::Node& node, std::string_view source_name,
                                    std::span<const std::string> ignored_keys) {
  Parser p(source_name);
  if (!node.IsMap()) {
    return p.error(node, "(top level)", fmt::format("expected a map with model, hosts, layout and config, found {}",
                                                    Parser::describe(node)));
  }
  ENGRAM_RETURN_IF_ERROR(p.check_keys(node, "", kTopKeys, ignored_keys));
  Deployment d;
  if (node["model"]) ENGRAM_RETURN_IF_ERROR(parse_model_field(p, node["model"], "model", d.model, d.model_hash));
  if (!node["hosts"]) return p.error(node, "hosts", "missing; list the hosts, e.g. hosts: [{name: n0, gpus: 8}]");
  std::vector<std::string> shm_defaulted;
  ENGRAM_RETURN_IF_ERROR(parse_hosts(p, node["hosts"], d.hosts, shm_defaulted));
  if (!shm_defaulted.empty()) {
    d.defaults_used.push_back({fmt::format("shm_size ({})", join_limited(shm_defaulted)), "64 MiB",
                               "Docker's default /dev/shm; give shm_size (what `df -h /dev/shm` shows there)"});
  }
  if (node["rank_hosts"]) ENGRAM_RETURN_IF_ERROR(parse_rank_hosts(p, node["rank_hosts"], d));
  if (node["layout"]) ENGRAM_RETURN_IF_ERROR(parse_layout(p, node["layout"], d.layout));
  if (node["config"]) ENGRAM_RETURN_IF_ERROR(parse_config(p, node["config"], d.config));
  if (node["engine"]) ENGRAM_RETURN_IF_ERROR(parse_engine(p, node["engine"], d.engine));
  if (node["timeouts"]) ENGRAM_RETURN_IF_ERROR(parse_timeouts(p, node["timeouts"], d.timeouts));
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
