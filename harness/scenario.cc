#include "harness/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "core/deployment/deployment_yaml.h"
#include "core/deployment/model_yaml.h"
#include "core/base/text_excerpt.h"
#include "core/base/units.h"
#include "core/base/yaml_fields.h"
#include "sim/faults.h"

namespace engram {
namespace {

// The scenario's own value forms on top of the shared field reading.
class Reader : public YamlFields {
 public:
  using YamlFields::YamlFields;

  Status expect_map(const YAML::Node& node, std::string_view path, std::string_view example) const {
    if (node.IsMap()) return Status::ok();
    return error(node, path, fmt::format("expected a map, found {}; write e.g. {}", describe(node), example));
  }

  Result<int64_t> integer(const YAML::Node& node, std::string_view path, int64_t min_value, int64_t max_value) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    int64_t value = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (ec != std::errc() || end != t.data() + t.size())
      return error(node, path, fmt::format("'{}' is not a whole number in [{}, {}]; write e.g. {}", excerpt(t), min_value,
                                           max_value, std::max<int64_t>(min_value, 1)));
    if (value < min_value || value > max_value)
      return error(node, path, fmt::format("'{}' is not a whole number in [{}, {}]; write e.g. {}", value, min_value,
                                           max_value, std::max<int64_t>(min_value, 1)));
    return value;
  }

  Result<uint64_t> seed(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (ec != std::errc() || end != t.data() + t.size())
      return error(node, path, fmt::format("'{}' is not a whole number in [0, 18446744073709551615]; write e.g. 1",
                                           excerpt(t)));
    return value;
  }

  Result<double> probability(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    double value = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (ec != std::errc() || end != t.data() + t.size() || !(value >= 0.0 && value <= 1.0))
      return error(node, path, fmt::format("'{}' is not a probability; write a number in [0, 1], e.g. 0.05", excerpt(t)));
    return value;
  }

  Result<std::vector<std::string>> text_list(const YAML::Node& node, std::string_view path) const {
    if (!node.IsSequence())
      return error(node, path, fmt::format("expected a list, found {}; write e.g. [word, \"other words\"]", describe(node)));
    std::vector<std::string> out;
    for (size_t i = 0; i < node.size(); ++i) {
      ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node[i], fmt::format("{}[{}]", path, i)));
      out.push_back(std::move(t));
    }
    return out;
  }

  Result<std::string> fault_site(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    if (sim::parse_fault_site(t).is_ok()) return t;
    return error(node, path, fmt::format("'{}' is not a fault site; write one of {}", excerpt(t), sim::fault_site_names()));
  }

  // A size as written, decimals allowed ("23.6GiB"); the tolerance is half
  // a unit of the last written digit, in the written unit.
  Result<ExpectedSize> size(const YAML::Node& node, std::string_view path) const {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, text(node, path));
    size_t number_end = 0;
    while (number_end < t.size() && (std::isdigit(static_cast<unsigned char>(t[number_end])) || t[number_end] == '.'))
      ++number_end;
    std::string unit = t.substr(number_end);
    unit.erase(0, unit.find_first_not_of(' '));
    double value = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + number_end, value);
    auto unit_bytes = parse_bytes("1" + unit, path);
    if (number_end == 0 || ec != std::errc() || end != t.data() + number_end || !unit_bytes.is_ok())
      return error(node, path,
                   fmt::format("'{}' is not a size; write a number with a unit, e.g. 23.6GiB, 64MiB or 4096B", excerpt(t)));
    const size_t dot = t.find('.');
    const int decimals = dot == std::string::npos || dot >= number_end ? 0 : static_cast<int>(number_end - dot - 1);
    ExpectedSize s;
    s.text = t;
    s.bytes = static_cast<uint64_t>(std::llround(value * static_cast<double>(unit_bytes.value())));
    s.tolerance_bytes =
        static_cast<uint64_t>(static_cast<double>(unit_bytes.value()) * 0.5 * std::pow(10.0, -decimals));
    return s;
  }
};

constexpr const char* kDeploymentKeys[] = {"model", "hosts", "rank_hosts", "layout", "config", "timeouts"};
constexpr const char* kScenarioKeys[] = {"name", "description", "seed", "faults", "lookup", "expect",
                                         "model", "hosts", "rank_hosts", "layout", "config", "timeouts"};
constexpr const char* kFaultKeys[] = {"planned", "rates"};
constexpr const char* kPlannedKeys[] = {"site", "rank", "occurrence", "at", "delay_ms"};
constexpr const char* kLookupKeys[] = {"run", "model", "tokens", "batches"};
constexpr const char* kBatchKeys[] = {"tokens", "dead"};
constexpr const char* kExpectKeys[] = {"placement", "warnings", "error", "memory", "handle_type",
                                       "lookup_equal", "faults_fired", "no_leaks", "shm_remote_numa_maps"};
constexpr const char* kErrorKeys[] = {"kind", "contains", "rank", "step"};
constexpr const char* kMemoryKeys[] = {"hbm_per_gpu", "host_per_node", "host_per_rank", "copies_per_node"};
constexpr const char* kPlacementRangeKeys[] = {"ranks", "placement"};

Result<Placement> placement_of(const Reader& r, const YAML::Node& node, std::string_view path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string t, r.text(node, path));
  auto p = parse_placement(t);
  if (!p.is_ok())
    return r.error(node, path,
                   fmt::format("'{}' is not a placement; write device_collective, device_peer, host_shared, "
                               "host_head_sharded or host_private",
                               excerpt(t)));
  return p.value();
}

Status parse_faults(const Reader& r, const YAML::Node& node, Scenario& s) {
  ENGRAM_RETURN_IF_ERROR(r.expect_map(node, "faults", "faults: {planned: [{site: import, rank: 1}], rates: {send: 0.1}}"));
  ENGRAM_RETURN_IF_ERROR(r.check_keys(node, "faults", kFaultKeys));
  if (const YAML::Node planned = node["planned"]) {
    if (!planned.IsSequence())
      return r.error(planned, "faults.planned",
                     fmt::format("expected a list, found {}; write e.g. [{{site: import, rank: 1}}]", Reader::describe(planned)));
    for (size_t i = 0; i < planned.size(); ++i) {
      const YAML::Node f = planned[i];
      const std::string path = fmt::format("faults.planned[{}]", i);
      ENGRAM_RETURN_IF_ERROR(r.expect_map(f, path, "{site: import, rank: 1, occurrence: 1}"));
      ENGRAM_RETURN_IF_ERROR(r.check_keys(f, path, kPlannedKeys));
      ScenarioFault fault;
      if (!f["site"]) return r.error(f, path + ".site", "missing; name the fault site, e.g. site: import");
      ENGRAM_ASSIGN_OR_RETURN(fault.site, r.fault_site(f["site"], path + ".site"));
      if (!f["rank"]) return r.error(f, path + ".rank", "missing; name the rank the fault hits, e.g. rank: 0");
      ENGRAM_ASSIGN_OR_RETURN(int64_t rank, r.integer(f["rank"], path + ".rank", 0, 1 << 20));
      fault.rank = static_cast<int>(rank);
      if (f["occurrence"]) {
        ENGRAM_ASSIGN_OR_RETURN(int64_t occ, r.integer(f["occurrence"], path + ".occurrence", 1, 1 << 20));
        fault.occurrence = static_cast<int>(occ);
      }
      const bool process_fault = sim::is_process_fault(sim::parse_fault_site(fault.site).value());
      if (f["at"]) {
        if (!process_fault)
          return r.error(f["at"], path + ".at",
                         "only a process fault (rank_death, hang, slow) has a checkpoint; remove 'at' or use one of "
                         "those sites");
        ENGRAM_ASSIGN_OR_RETURN(fault.at, r.text(f["at"], path + ".at"));
        if (!sim::is_checkpoint(fault.at))
          return r.error(f["at"], path + ".at",
                         fmt::format("'{}' is not a checkpoint; write one of {}", excerpt(fault.at), sim::checkpoint_names()));
      }
      if (f["delay_ms"]) {
        if (fault.site != "slow")
          return r.error(f["delay_ms"], path + ".delay_ms", "only a slow fault has a delay; remove delay_ms or use site: slow");
        ENGRAM_ASSIGN_OR_RETURN(int64_t ms, r.integer(f["delay_ms"], path + ".delay_ms", 1, int64_t{24} * 3600 * 1000));
        fault.delay_ms = static_cast<uint64_t>(ms);
      }
      s.planned_faults.push_back(std::move(fault));
    }
  }
  if (const YAML::Node rates = node["rates"]) {
    ENGRAM_RETURN_IF_ERROR(r.expect_map(rates, "faults.rates", "rates: {send: 0.1, import: 0.05}"));
    for (auto it = rates.begin(); it != rates.end(); ++it) {
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      ScenarioFaultRate rate;
      ENGRAM_ASSIGN_OR_RETURN(rate.site, r.fault_site(key, "faults.rates"));
      ENGRAM_ASSIGN_OR_RETURN(rate.probability, r.probability(value, "faults.rates." + rate.site));
      s.fault_rates.push_back(std::move(rate));
    }
  }
  return Status::ok();
}

Status parse_lookup(const Reader& r, const YAML::Node& node, ScenarioLookup& l) {
  ENGRAM_RETURN_IF_ERROR(r.expect_map(node, "lookup", "lookup: {model: tiny, tokens: 4, run: true}"));
  ENGRAM_RETURN_IF_ERROR(r.check_keys(node, "lookup", kLookupKeys));
  if (node["run"]) { ENGRAM_ASSIGN_OR_RETURN(l.run, r.boolean(node["run"], "lookup.run")); }
  if (node["model"]) {
    ENGRAM_RETURN_IF_ERROR(parse_model_field(r, node["model"], "lookup.model", l.model, l.model_hash));
    // The lookup builds whole tables in memory: only the test-sized presets.
    if (l.model != "tiny" && l.model != "tiny-8h" && l.model != "tiny-7h")
      return r.error(node["model"].IsMap() ? node["model"]["name"] : node["model"], "lookup.model",
                     fmt::format("'{}' cannot be built for the lookup check; write tiny, tiny-8h or tiny-7h "
                                 "(test-sized tables; the deployment's own model still decides the placement)",
                                 excerpt(l.model)));
  }
  if (node["tokens"]) {
    ENGRAM_ASSIGN_OR_RETURN(int64_t tokens, r.integer(node["tokens"], "lookup.tokens", 0, 4096));
    l.tokens = static_cast<int>(tokens);
  }
  if (const YAML::Node batches = node["batches"]) {
    if (!batches.IsSequence() || batches.size() == 0)
      return r.error(batches, "lookup.batches",
                     fmt::format("expected a list of steps, found {}; write e.g. [{{tokens: [8, 8]}}, {{tokens: [7, 7], "
                                 "dead: [1]}}]",
                                 Reader::describe(batches)));
    for (size_t b = 0; b < batches.size(); ++b) {
      const std::string path = fmt::format("lookup.batches[{}]", b);
      const YAML::Node batch = batches[b];
      ENGRAM_RETURN_IF_ERROR(r.expect_map(batch, path, "{tokens: [8, 8, 8, 8], dead: [1]}"));
      ENGRAM_RETURN_IF_ERROR(r.check_keys(batch, path, kBatchKeys));
      ScenarioBatch out;
      auto numbers = [&](const char* key, int64_t max_value, std::vector<int>& into) -> Status {
        const YAML::Node list = batch[key];
        if (!list.IsSequence())
          return r.error(list, path + "." + key,
                         fmt::format("expected a list of whole numbers, found {}; write e.g. [7, 0, 5, 1]",
                                     Reader::describe(list)));
        for (size_t i = 0; i < list.size(); ++i) {
          ENGRAM_ASSIGN_OR_RETURN(int64_t v, r.integer(list[i], fmt::format("{}.{}[{}]", path, key, i), 0, max_value));
          into.push_back(static_cast<int>(v));
        }
        return Status::ok();
      };
      if (!batch["tokens"])
        return r.error(batch, path + ".tokens", "missing; give the tokens of each DP replica, e.g. tokens: [7, 0, 5, 1]");
      ENGRAM_RETURN_IF_ERROR(numbers("tokens", 4096, out.tokens_by_replica));
      if (batch["dead"]) ENGRAM_RETURN_IF_ERROR(numbers("dead", 1 << 20, out.dead_replicas));
      l.batches.push_back(std::move(out));
    }
  }
  return Status::ok();
}

Status parse_placements(const Reader& r, const YAML::Node& node, std::vector<ExpectedPlacement>& out) {
  if (node.IsScalar()) {
    ExpectedPlacement p;
    ENGRAM_ASSIGN_OR_RETURN(p.placement, placement_of(r, node, "expect.placement"));
    out.push_back(p);
    return Status::ok();
  }
  if (!node.IsSequence())
    return r.error(node, "expect.placement",
                   fmt::format("expected a placement or a list of {{ranks: 0-3, placement: ...}}, found {}",
                               Reader::describe(node)));
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node e = node[i];
    const std::string path = fmt::format("expect.placement[{}]", i);
    ENGRAM_RETURN_IF_ERROR(r.expect_map(e, path, "{ranks: 0-3, placement: host_shared}"));
    ENGRAM_RETURN_IF_ERROR(r.check_keys(e, path, kPlacementRangeKeys));
    if (!e["ranks"]) return r.error(e, path + ".ranks", "missing; write the rank range, e.g. ranks: 0-3");
    if (!e["placement"]) return r.error(e, path + ".placement", "missing; write e.g. placement: host_shared");
    ENGRAM_ASSIGN_OR_RETURN(std::string range_text, r.text(e["ranks"], path + ".ranks"));
    auto range = parse_rank_range(range_text);
    if (!range.is_ok()) return r.error(e["ranks"], path + ".ranks", range.status().message());
    ExpectedPlacement p;
    p.first_rank = range->first;
    p.last_rank = range->second;
    ENGRAM_ASSIGN_OR_RETURN(p.placement, placement_of(r, e["placement"], path + ".placement"));
    out.push_back(p);
  }
  return Status::ok();
}

Result<ErrorCode> error_kind_of(const Reader& r, const YAML::Node& node, std::string_view path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string t, r.text(node, path));
  constexpr ErrorCode kinds[] = {ErrorCode::kInvalidArgument, ErrorCode::kFailedPrecondition,
                                 ErrorCode::kResourceExhausted, ErrorCode::kUnavailable,
                                 ErrorCode::kPermissionDenied,  ErrorCode::kNotFound,
                                 ErrorCode::kAlreadyExists,     ErrorCode::kDeadlineExceeded,
                                 ErrorCode::kInternal};
  std::string list;
  for (ErrorCode k : kinds) {
    if (t == error_code_name(k)) return k;
    list += (list.empty() ? "" : ", ") + std::string(error_code_name(k));
  }
  return r.error(node, path, fmt::format("'{}' is not an error kind; write one of {}", excerpt(t), list));
}

Status parse_expect(const Reader& r, const YAML::Node& node, ScenarioExpect& x) {
  ENGRAM_RETURN_IF_ERROR(r.expect_map(node, "expect", "expect: {placement: host_shared, warnings: []}"));
  ENGRAM_RETURN_IF_ERROR(r.check_keys(node, "expect", kExpectKeys));
  if (node["placement"]) ENGRAM_RETURN_IF_ERROR(parse_placements(r, node["placement"], x.placements));
  if (node["warnings"]) {
    ENGRAM_ASSIGN_OR_RETURN(x.warnings, r.text_list(node["warnings"], "expect.warnings"));
  }
  if (const YAML::Node e = node["error"]) {
    ENGRAM_RETURN_IF_ERROR(r.expect_map(e, "expect.error", "error: {kind: failed_precondition, contains: [IMEX]}"));
    ENGRAM_RETURN_IF_ERROR(r.check_keys(e, "expect.error", kErrorKeys));
    ExpectedError err;
    if (!e["kind"]) return r.error(e, "expect.error.kind", "missing; write e.g. kind: failed_precondition");
    ENGRAM_ASSIGN_OR_RETURN(err.kind, error_kind_of(r, e["kind"], "expect.error.kind"));
    if (e["contains"]) { ENGRAM_ASSIGN_OR_RETURN(err.contains, r.text_list(e["contains"], "expect.error.contains")); }
    if (e["rank"]) {
      ENGRAM_ASSIGN_OR_RETURN(int64_t rank, r.integer(e["rank"], "expect.error.rank", 0, 1 << 20));
      err.rank = static_cast<int>(rank);
    }
    if (e["step"]) { ENGRAM_ASSIGN_OR_RETURN(err.step, r.text(e["step"], "expect.error.step")); }
    x.error = std::move(err);
  }
  if (const YAML::Node m = node["memory"]) {
    ENGRAM_RETURN_IF_ERROR(r.expect_map(m, "expect.memory", "memory: {hbm_per_gpu: 47.2GiB, host_per_node: 188.8GiB}"));
    ENGRAM_RETURN_IF_ERROR(r.check_keys(m, "expect.memory", kMemoryKeys));
    if (m["hbm_per_gpu"]) { ENGRAM_ASSIGN_OR_RETURN(x.hbm_per_gpu, r.size(m["hbm_per_gpu"], "expect.memory.hbm_per_gpu")); }
    if (m["host_per_node"]) { ENGRAM_ASSIGN_OR_RETURN(x.host_per_node, r.size(m["host_per_node"], "expect.memory.host_per_node")); }
    if (m["host_per_rank"]) { ENGRAM_ASSIGN_OR_RETURN(x.host_per_rank, r.size(m["host_per_rank"], "expect.memory.host_per_rank")); }
    if (m["copies_per_node"]) {
      ENGRAM_ASSIGN_OR_RETURN(int64_t copies, r.integer(m["copies_per_node"], "expect.memory.copies_per_node", 0, 1 << 20));
      x.copies_per_node = static_cast<int>(copies);
    }
  }
  if (const YAML::Node h = node["handle_type"]) {
    ENGRAM_ASSIGN_OR_RETURN(std::string t, r.text(h, "expect.handle_type"));
    if (t == "posix_fd") x.handle_type = HandleType::kPosixFd;
    else if (t == "fabric") x.handle_type = HandleType::kFabric;
    else return r.error(h, "expect.handle_type", fmt::format("'{}' is not a handle type; write posix_fd or fabric", excerpt(t)));
  }
  if (node["lookup_equal"]) { ENGRAM_ASSIGN_OR_RETURN(x.lookup_equal, r.boolean(node["lookup_equal"], "expect.lookup_equal")); }
  if (node["shm_remote_numa_maps"]) {
    ENGRAM_ASSIGN_OR_RETURN(int64_t maps, r.integer(node["shm_remote_numa_maps"], "expect.shm_remote_numa_maps", 0,
                                                    int64_t{1} << 40));
    x.shm_remote_numa_maps = static_cast<uint64_t>(maps);
  }
  if (const YAML::Node f = node["faults_fired"]) {
    if (!f.IsSequence())
      return r.error(f, "expect.faults_fired", fmt::format("expected a list of fault sites, found {}; write e.g. [import]",
                                                           Reader::describe(f)));
    for (size_t i = 0; i < f.size(); ++i) {
      ENGRAM_ASSIGN_OR_RETURN(std::string site, r.fault_site(f[i], fmt::format("expect.faults_fired[{}]", i)));
      x.faults_fired.push_back(std::move(site));
    }
  }
  if (node["no_leaks"]) {
    ENGRAM_ASSIGN_OR_RETURN(bool no_leaks, r.boolean(node["no_leaks"], "expect.no_leaks"));
    if (!no_leaks)
      return r.error(node["no_leaks"], "expect.no_leaks",
                     "leaks are never acceptable: every run is checked for them; write true or remove the field");
  }
  if (x.error && x.lookup_equal)
    return r.error(node["lookup_equal"], "expect.lookup_equal",
                   "a run that expects an error cannot also expect equal lookups; remove one of them");
  return Status::ok();
}

std::string stem_of(std::string_view source) {
  std::filesystem::path p{std::string(source)};
  return p.stem().string();
}

}  // namespace

bool ExpectedSize::matches(uint64_t actual) const {
  const uint64_t diff = actual > bytes ? actual - bytes : bytes - actual;
  return diff <= tolerance_bytes;
}

Result<std::pair<int, int>> parse_rank_range(std::string_view text) {
  auto number = [](std::string_view t, int& out) {
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return ec == std::errc() && end == t.data() + t.size() && out >= 0;
  };
  const size_t dash = text.find('-');
  int first = 0, last = 0;
  bool ok = dash == std::string_view::npos ? (number(text, first) && (last = first, true))
                                           : (number(text.substr(0, dash), first) && number(text.substr(dash + 1), last));
  if (!ok || last < first)
    return invalid_argument(fmt::format("'{}' is not a rank range; write FIRST-LAST (e.g. 0-3) or one rank", excerpt(text)));
  return std::make_pair(first, last);
}

Result<Scenario> parse_scenario(const YAML::Node& root, std::string_view source_name) {
  Reader r(source_name);
  if (!root.IsMap())
    return r.error(root, "(top level)",
                   fmt::format("expected a map with hosts, layout, config and expect, found {}", Reader::describe(root)));
  ENGRAM_RETURN_IF_ERROR(r.check_keys(root, "", kScenarioKeys));
  Scenario s;
  s.source = std::string(source_name);
  s.name = stem_of(source_name);
  if (root["name"]) { ENGRAM_ASSIGN_OR_RETURN(s.name, r.name(root["name"], "name", kMaxNameBytes)); }
  if (root["description"]) { ENGRAM_ASSIGN_OR_RETURN(s.description, r.text(root["description"], "description")); }

  // The deployment part, by the deployment parser, skipping our own keys.
  std::vector<std::string> ours;
  for (const char* k : kScenarioKeys)
    if (std::none_of(std::begin(kDeploymentKeys), std::end(kDeploymentKeys), [&](const char* d) { return std::string_view(d) == k; }))
      ours.emplace_back(k);
  ENGRAM_ASSIGN_OR_RETURN(s.deployment, parse_deployment(root, source_name, ours));

  if (root["seed"]) { ENGRAM_ASSIGN_OR_RETURN(s.seed, r.seed(root["seed"], "seed")); }
  if (root["faults"]) ENGRAM_RETURN_IF_ERROR(parse_faults(r, root["faults"], s));
  if (root["lookup"]) ENGRAM_RETURN_IF_ERROR(parse_lookup(r, root["lookup"], s.lookup));
  if (!root["expect"])
    return r.error(root, "expect", "missing; a scenario states what must happen, e.g. expect: {placement: host_shared}");
  ENGRAM_RETURN_IF_ERROR(parse_expect(r, root["expect"], s.expect));
  if (s.expect.lookup_equal && !s.lookup.run)
    return r.error(root["expect"]["lookup_equal"], "expect.lookup_equal",
                   "lookup.run is false, so no lookup is compared; set lookup.run: true or remove lookup_equal");
  for (size_t b = 0; b < s.lookup.batches.size(); ++b) {
    const ScenarioBatch& batch = s.lookup.batches[b];
    const int dp = s.deployment.layout.dp;
    const YAML::Node at = root["lookup"]["batches"][b];
    if (static_cast<int>(batch.tokens_by_replica.size()) != dp)
      return r.error(at["tokens"], fmt::format("lookup.batches[{}].tokens", b),
                     fmt::format("{} entries for {} DP replicas (layout.dp); give one token count per replica",
                                 batch.tokens_by_replica.size(), dp));
    for (int replica : batch.dead_replicas)
      if (replica >= dp)
        return r.error(at["dead"], fmt::format("lookup.batches[{}].dead", b),
                       fmt::format("replica {} does not exist; replicas are 0..{} (layout.dp is {})", replica, dp - 1,
                                   dp));
  }
  return s;
}

Result<Scenario> parse_scenario_text(std::string_view text, std::string_view source_name) {
  ENGRAM_ASSIGN_OR_RETURN(YAML::Node root, load_yaml_text(text, source_name));
  return parse_scenario(root, source_name);
}

Result<Scenario> load_scenario_file(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "scenario"));
  return parse_scenario_text(text, path);
}

Result<std::vector<std::string>> scenario_files(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return std::vector<std::string>{path};
  if (!std::filesystem::is_directory(path, ec))
    return invalid_argument(fmt::format("scenario: '{}' is neither a file nor a directory; check the path", excerpt(path, 200)));
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext == ".yaml" || ext == ".yml") files.push_back(entry.path().string());
  }
  if (ec) return invalid_argument(fmt::format("scenario: cannot list '{}': {}", path, ec.message()));
  std::sort(files.begin(), files.end());
  if (files.empty())
    return invalid_argument(fmt::format("scenario: '{}' holds no *.yaml files; give a scenario file or directory", path));
  return files;
}

}  // namespace engram
