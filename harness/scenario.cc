#include "harness/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <tuple>
#include <utility>

#include "core/deployment_file/deployment_yaml.h"
#include "core/deployment/model_yaml.h"
#include "core/base/field_errors.h"
#include "core/base/text_excerpt.h"
#include "core/base/units.h"
#include "core/base/yaml_fields.h"
#include "core/base/size_text.h"
#include "core/model/table_spec.h"
#include "harness/lookup_steps_yaml.h"
#include "harness/scenario_reader.h"
#include "sim/faults.h"

namespace engram::harness {
namespace {

using Reader = ScenarioReader;

constexpr const char* kDeploymentKeys[] = {"model", "hosts", "rank_hosts", "layout", "config", "engine", "timeouts"};
constexpr const char* kScenarioKeys[] = {"name", "description", "seed", "faults", "lookup", "expect",
                                         "model", "hosts", "rank_hosts", "layout", "config", "engine", "timeouts"};
constexpr const char* kFaultKeys[] = {"planned", "rates", "slow_delay_ms"};
constexpr const char* kPlannedKeys[] = {"site", "rank", "occurrence", "at", "delay_ms", "link_factor", "gpu_factor"};
constexpr const char* kLookupKeys[] = {"run", "model", "tokens", "batches", "requests", "steps"};
constexpr const char* kBatchKeys[] = {"tokens", "dead"};
constexpr const char* kExpectKeys[] = {"placement",    "warnings",        "error",        "memory",
                                       "handle_type",  "lookup_equal",    "ids_equal_whole", "faults_fired",
                                       "no_leaks",     "shm_remote_numa_maps", "step_time_us_max"};
constexpr const char* kErrorKeys[] = {"kind", "contains", "rank", "step"};
constexpr const char* kMemoryKeys[] = {"hbm_per_gpu", "host_per_node", "host_per_rank", "copies_per_node"};
constexpr const char* kPlacementRangeKeys[] = {"ranks", "placement"};
constexpr const char* kStepTimeKeys[] = {"p50", "max"};
constexpr const char* kStepTimeRangeKeys[] = {"ranks", "p50", "max"};
// A step time bound, in us, and a slow fault's factor: beyond these they are typos.
constexpr double kMaxStepTimeUs = 1e9;
constexpr double kMaxSlowFactor = 1000;

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

void parse_planned_fault(const Reader& r, const YAML::Node& f, const std::string& path, Scenario& s, FieldErrors& e) {
  if (!open_section(r, f, path, "{site: import, rank: 1, occurrence: 1}", kPlannedKeys, e)) return;
  ScenarioFault fault;
  const size_t before = e.count();
  if (!f["site"]) e.add(r.error(f, path + ".site", "missing; name the fault site, e.g. site: import"));
  const bool site_read = f["site"] && e.set(fault.site, r.fault_site(f["site"], path + ".site"));
  int64_t number = 0;
  if (!f["rank"]) e.add(r.error(f, path + ".rank", "missing; name the rank the fault hits, e.g. rank: 0"));
  else if (e.set(number, r.integer(f["rank"], path + ".rank", 0, 1 << 20))) fault.rank = static_cast<int>(number);
  if (f["occurrence"] && e.set(number, r.integer(f["occurrence"], path + ".occurrence", 1, 1 << 20)))
    fault.occurrence = static_cast<int>(number);
  // What the site allows, known once the site is.
  const bool process_fault = site_read && sim::is_process_fault(sim::parse_fault_site(fault.site).value());
  if (f["at"] && site_read) {
    if (!process_fault)
      e.add(r.error(f["at"], path + ".at",
                    "only a process fault (rank_death, hang, slow) has a checkpoint; remove 'at' or use one of those "
                    "sites"));
    else if (e.set(fault.at, r.text(f["at"], path + ".at")) && !sim::is_checkpoint(fault.at))
      e.add(r.error(f["at"], path + ".at",
                    fmt::format("'{}' is not a checkpoint; write one of {}", excerpt(fault.at), sim::checkpoint_names())));
  }
  if (f["delay_ms"] && site_read) {
    if (fault.site != "slow")
      e.add(r.error(f["delay_ms"], path + ".delay_ms", "only a slow fault has a delay; remove delay_ms or use site: slow"));
    else if (e.set(number, r.integer(f["delay_ms"], path + ".delay_ms", 1, int64_t{24} * 3600 * 1000)))
      fault.delay_ms = static_cast<uint64_t>(number);
  }
  for (auto [key, factor] : {std::pair{"link_factor", &fault.link_factor}, {"gpu_factor", &fault.gpu_factor}}) {
    if (!f[key] || !site_read) continue;
    const std::string field = path + "." + key;
    if (fault.site != "slow")
      e.add(r.error(f[key], field, fmt::format("only a slow fault makes links or the GPU slower; remove {} or use "
                                               "site: slow", key)));
    else
      e.set(*factor, r.number(f[key], field, 1, kMaxSlowFactor, "2 (twice as slow)"));
  }
  if (e.count() == before) s.planned_faults.push_back(std::move(fault));
}

void parse_faults(const Reader& r, const YAML::Node& node, Scenario& s, FieldErrors& e) {
  if (!open_section(r, node, "faults", "faults: {planned: [{site: import, rank: 1}], rates: {send: 0.1}}", kFaultKeys,
                    e))
    return;
  if (const YAML::Node planned = node["planned"]) {
    if (!planned.IsSequence())
      e.add(r.error(planned, "faults.planned",
                    fmt::format("expected a list, found {}; write e.g. [{{site: import, rank: 1}}]",
                                Reader::describe(planned))));
    else
      for (size_t i = 0; i < planned.size(); ++i)
        parse_planned_fault(r, planned[i], fmt::format("faults.planned[{}]", i), s, e);
  }
  if (const YAML::Node rates = node["rates"]) {
    if (!e.add(r.expect_map(rates, "faults.rates", "rates: {send: 0.1, import: 0.05}"))) return;
    for (auto it = rates.begin(); it != rates.end(); ++it) {
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      ScenarioFaultRate rate;
      if (e.set(rate.site, r.fault_site(key, "faults.rates")) &&
          e.set(rate.probability, r.probability(value, "faults.rates." + rate.site)))
        s.fault_rates.push_back(std::move(rate));
    }
  }
  int64_t delay_ms = 0;
  if (node["slow_delay_ms"] &&
      e.set(delay_ms, r.integer(node["slow_delay_ms"], "faults.slow_delay_ms", 1, int64_t{24} * 3600 * 1000)))
    s.slow_delay_ms = static_cast<uint64_t>(delay_ms);
}

void parse_batch(const Reader& r, const YAML::Node& batch, const std::string& path, ScenarioLookup& l, FieldErrors& e) {
  if (!open_section(r, batch, path, "{tokens: [8, 8, 8, 8], dead: [1]}", kBatchKeys, e)) return;
  ScenarioBatch out;
  const size_t before = e.count();
  auto numbers = [&](const char* key, int64_t max_value, std::vector<int>& into) {
    const YAML::Node list = batch[key];
    if (!list.IsSequence()) {
      e.add(r.error(list, path + "." + key,
                    fmt::format("expected a list of whole numbers, found {}; write e.g. [7, 0, 5, 1]",
                                Reader::describe(list))));
      return;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      int64_t v = 0;
      if (e.set(v, r.integer(list[i], fmt::format("{}.{}[{}]", path, key, i), 0, max_value)))
        into.push_back(static_cast<int>(v));
    }
  };
  if (!batch["tokens"])
    e.add(r.error(batch, path + ".tokens", "missing; give the tokens of each DP replica, e.g. tokens: [7, 0, 5, 1]"));
  else numbers("tokens", 4096, out.tokens_by_replica);
  if (batch["dead"]) numbers("dead", 1 << 20, out.dead_replicas);
  // A batch with an error is left out: the checks against layout.dp below
  // read only whole batches.
  if (e.count() == before) l.batches.push_back(std::move(out));
}

void parse_lookup(const Reader& r, const YAML::Node& node, ScenarioLookup& l, FieldErrors& e) {
  if (!open_section(r, node, "lookup", "lookup: {model: tiny, tokens: 4, run: true}", kLookupKeys, e)) return;
  if (node["run"]) e.set(l.run, r.boolean(node["run"], "lookup.run"));
  if (node["model"] && e.add(parse_model_field(r, node["model"], "lookup.model", l.model, l.model_hash))) {
    // The lookup builds whole tables in memory: only test-sized models.
    auto built = model_preset(l.model);
    if (!built.is_ok()) {
      e.add(built.status());
    } else if (built->table_bytes_total() > kMaxLookupModelBytes) {
      e.add(r.error(node["model"].IsMap() ? node["model"]["name"] : node["model"], "lookup.model",
                    fmt::format("'{}' holds {} of tables, more than the {} a lookup check builds in memory; write "
                                "tiny, tiny-8h, tiny-7h or a small model file (the deployment's own model still "
                                "decides the placement)",
                                excerpt(l.model), format_size_short(built->table_bytes_total()),
                                format_size_short(kMaxLookupModelBytes))));
    }
  }
  int64_t tokens = 0;
  if (node["tokens"] && e.set(tokens, r.integer(node["tokens"], "lookup.tokens", 0, 4096)))
    l.tokens = static_cast<int>(tokens);
  if (const YAML::Node batches = node["batches"]) {
    if (!batches.IsSequence() || batches.size() == 0) {
      e.add(r.error(batches, "lookup.batches",
                    fmt::format("expected a list of steps, found {}; write e.g. [{{tokens: [8, 8]}}, {{tokens: [7, 7], "
                                "dead: [1]}}]",
                                Reader::describe(batches))));
      return;
    }
    for (size_t b = 0; b < batches.size(); ++b) parse_batch(r, batches[b], fmt::format("lookup.batches[{}]", b), l, e);
  }
  parse_lookup_steps(r, node, l.steps, e);
}

void parse_placements(const Reader& r, const YAML::Node& node, std::vector<ExpectedPlacement>& out, FieldErrors& e) {
  if (node.IsScalar()) {
    ExpectedPlacement p;
    if (e.set(p.placement, placement_of(r, node, "expect.placement"))) out.push_back(p);
    return;
  }
  if (!node.IsSequence()) {
    e.add(r.error(node, "expect.placement",
                  fmt::format("expected a placement or a list of {{ranks: 0-3, placement: ...}}, found {}",
                              Reader::describe(node))));
    return;
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node n = node[i];
    const std::string path = fmt::format("expect.placement[{}]", i);
    if (!open_section(r, n, path, "{ranks: 0-3, placement: host_shared}", kPlacementRangeKeys, e)) continue;
    ExpectedPlacement p;
    bool whole = true;
    if (!n["ranks"]) whole = e.add(r.error(n, path + ".ranks", "missing; write the rank range, e.g. ranks: 0-3"));
    if (!n["placement"]) whole = e.add(r.error(n, path + ".placement", "missing; write e.g. placement: host_shared"));
    std::string range_text;
    if (n["ranks"] && e.set(range_text, r.text(n["ranks"], path + ".ranks"))) {
      auto range = parse_rank_range(range_text);
      if (range.is_ok()) {
        p.first_rank = range->first;
        p.last_rank = range->second;
      } else {
        whole = e.add(r.error(n["ranks"], path + ".ranks", range.status().message()));
      }
    } else {
      whole = false;
    }
    if (n["placement"]) whole = e.set(p.placement, placement_of(r, n["placement"], path + ".placement")) && whole;
    if (whole) out.push_back(p);
  }
}

// p50 and/or max of one expect.step_time_us_max entry (a map at `path`).
void parse_step_time_bounds(const Reader& r, const YAML::Node& n, const std::string& path, ExpectedStepTime& x,
                            FieldErrors& e) {
  for (auto [key, bound] : {std::pair{"p50", &x.p50_us}, {"max", &x.max_us}})
    if (n[key]) {
      double us = 0;
      if (e.set(us, r.number(n[key], path + "." + key, 0, kMaxStepTimeUs, "12.5"))) *bound = us;
    }
  if (!n["p50"] && !n["max"])
    e.add(r.error(n, path, "names no bound; write p50 and/or max in microseconds, e.g. {p50: 8, max: 12.5}"));
  if (x.p50_us && x.max_us && *x.p50_us > *x.max_us)
    e.add(r.error(n["p50"], path + ".p50",
                  fmt::format("{} us is above max {} us, and a median never exceeds the max; lower p50 or raise max",
                              *x.p50_us, *x.max_us)));
}

// A number (every rank's max), {p50, max} (every rank's), or a list of
// {ranks, p50, max}.
void parse_expected_step_times(const Reader& r, const YAML::Node& node, std::vector<ExpectedStepTime>& out,
                               FieldErrors& e) {
  const std::string path = "expect.step_time_us_max";
  if (node.IsScalar()) {
    ExpectedStepTime x;
    double us = 0;
    if (e.set(us, r.number(node, path, 0, kMaxStepTimeUs, "12.5"))) {
      x.max_us = us;
      out.push_back(x);
    }
    return;
  }
  if (node.IsMap()) {
    ExpectedStepTime x;
    const size_t before = e.count();
    e.add(r.check_keys(node, path, kStepTimeKeys));
    parse_step_time_bounds(r, node, path, x, e);
    if (e.count() == before) out.push_back(x);
    return;
  }
  if (!node.IsSequence() || node.size() == 0) {
    e.add(r.error(node, path,
                  fmt::format("expected microseconds (12.5), {{p50: 8, max: 12.5}} or a list of {{ranks: 0-3, max: "
                              "12.5}}, found {}",
                              Reader::describe(node))));
    return;
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node n = node[i];
    const std::string at = fmt::format("{}[{}]", path, i);
    if (!open_section(r, n, at, "{ranks: 0-3, p50: 8, max: 12.5}", kStepTimeRangeKeys, e)) continue;
    ExpectedStepTime x;
    const size_t before = e.count();
    std::string range_text;
    if (!n["ranks"]) {
      e.add(r.error(n, at + ".ranks", "missing; write the rank range, e.g. ranks: 0-3"));
    } else if (e.set(range_text, r.text(n["ranks"], at + ".ranks"))) {
      auto range = parse_rank_range(range_text);
      if (range.is_ok()) std::tie(x.first_rank, x.last_rank) = range.value();
      else e.add(r.error(n["ranks"], at + ".ranks", range.status().message()));
    }
    parse_step_time_bounds(r, n, at, x, e);
    if (e.count() == before) out.push_back(x);
  }
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

void parse_expected_error(const Reader& r, const YAML::Node& node, ScenarioExpect& x, FieldErrors& e) {
  if (!open_section(r, node, "expect.error", "error: {kind: failed_precondition, contains: [IMEX]}", kErrorKeys, e))
    return;
  ExpectedError err;
  if (!node["kind"]) e.add(r.error(node, "expect.error.kind", "missing; write e.g. kind: failed_precondition"));
  else e.set(err.kind, error_kind_of(r, node["kind"], "expect.error.kind"));
  if (node["contains"]) e.set(err.contains, r.text_list(node["contains"], "expect.error.contains"));
  int64_t rank = 0;
  if (node["rank"] && e.set(rank, r.integer(node["rank"], "expect.error.rank", 0, 1 << 20)))
    err.rank = static_cast<int>(rank);
  if (node["step"]) e.set(err.step, r.text(node["step"], "expect.error.step"));
  x.error = std::move(err);
}

void parse_expected_memory(const Reader& r, const YAML::Node& m, ScenarioExpect& x, FieldErrors& e) {
  if (!open_section(r, m, "expect.memory", "memory: {hbm_per_gpu: 47.2GiB, host_per_node: 188.8GiB}", kMemoryKeys, e))
    return;
  if (m["hbm_per_gpu"]) e.set(x.hbm_per_gpu, r.size(m["hbm_per_gpu"], "expect.memory.hbm_per_gpu"));
  if (m["host_per_node"]) e.set(x.host_per_node, r.size(m["host_per_node"], "expect.memory.host_per_node"));
  if (m["host_per_rank"]) e.set(x.host_per_rank, r.size(m["host_per_rank"], "expect.memory.host_per_rank"));
  int64_t copies = 0;
  if (m["copies_per_node"] && e.set(copies, r.integer(m["copies_per_node"], "expect.memory.copies_per_node", 0, 1 << 20)))
    x.copies_per_node = static_cast<int>(copies);
}

void parse_expect(const Reader& r, const YAML::Node& node, ScenarioExpect& x, FieldErrors& e) {
  if (!open_section(r, node, "expect", "expect: {placement: host_shared, warnings: []}", kExpectKeys, e)) return;
  if (node["placement"]) parse_placements(r, node["placement"], x.placements, e);
  if (node["warnings"]) e.set(x.warnings, r.text_list(node["warnings"], "expect.warnings"));
  if (const YAML::Node n = node["error"]) parse_expected_error(r, n, x, e);
  if (const YAML::Node m = node["memory"]) parse_expected_memory(r, m, x, e);
  if (const YAML::Node h = node["handle_type"]) {
    // One type for every group, or a list: one per shard group in group order.
    auto one = [&](const YAML::Node& n, const std::string& path) -> std::optional<HandleType> {
      std::string t;
      if (!e.set(t, r.text(n, path))) return std::nullopt;
      if (const std::optional<HandleType> type = parse_handle_type(t)) return type;
      e.add(r.error(n, path, fmt::format("'{}' is not a handle type; write {}", excerpt(t), handle_type_choices())));
      return std::nullopt;
    };
    if (h.IsSequence()) {
      if (h.size() == 0)
        e.add(r.error(h, "expect.handle_type", "an empty list; write one handle type per shard group, or one for all"));
      x.handle_types_every_group = true;
      for (size_t i = 0; i < h.size(); ++i)
        if (auto t = one(h[i], fmt::format("expect.handle_type[{}]", i)))
          x.handle_types_by_group[static_cast<int>(i)] = *t;
    } else if (h.IsMap()) {
      if (h.size() == 0)
        e.add(r.error(h, "expect.handle_type", "an empty map; write {GROUP: TYPE, ...}, e.g. {1: posix_fd}"));
      for (const auto& entry : h) {
        int64_t group = 0;
        if (!e.set(group, r.integer(entry.first, "expect.handle_type (a shard group index)", 0, 1 << 20))) continue;
        if (auto t = one(entry.second, fmt::format("expect.handle_type.{}", group)))
          x.handle_types_by_group[static_cast<int>(group)] = *t;
      }
    } else {
      x.handle_type = one(h, "expect.handle_type");
    }
  }
  if (node["lookup_equal"]) e.set(x.lookup_equal, r.boolean(node["lookup_equal"], "expect.lookup_equal"));
  if (node["ids_equal_whole"]) e.set(x.ids_equal_whole, r.boolean(node["ids_equal_whole"], "expect.ids_equal_whole"));
  int64_t maps = 0;
  if (node["shm_remote_numa_maps"] &&
      e.set(maps, r.integer(node["shm_remote_numa_maps"], "expect.shm_remote_numa_maps", 0, int64_t{1} << 40)))
    x.shm_remote_numa_maps = static_cast<uint64_t>(maps);
  if (const YAML::Node f = node["faults_fired"]) {
    if (!f.IsSequence()) {
      e.add(r.error(f, "expect.faults_fired",
                    fmt::format("expected a list of fault sites, found {}; write e.g. [import]", Reader::describe(f))));
    } else {
      for (size_t i = 0; i < f.size(); ++i) {
        std::string site;
        if (e.set(site, r.fault_site(f[i], fmt::format("expect.faults_fired[{}]", i))))
          x.faults_fired.push_back(std::move(site));
      }
    }
  }
  if (const YAML::Node t = node["step_time_us_max"]) parse_expected_step_times(r, t, x.step_time_us_max, e);
  bool no_leaks = true;
  if (node["no_leaks"] && e.set(no_leaks, r.boolean(node["no_leaks"], "expect.no_leaks")) && !no_leaks)
    e.add(r.error(node["no_leaks"], "expect.no_leaks",
                  "leaks are never acceptable: every run is checked for them; write true or remove the field"));
  if (x.error && x.lookup_equal)
    e.add(r.error(node["lookup_equal"], "expect.lookup_equal",
                  "a run that expects an error cannot also expect equal lookups; remove one of them"));
  if (x.error && !x.step_time_us_max.empty())
    e.add(r.error(node["step_time_us_max"], "expect.step_time_us_max",
                  "a run that expects an error cannot also bound every rank's lookup step time; remove one of them"));
  if (x.error && x.ids_equal_whole)
    e.add(r.error(node["ids_equal_whole"], "expect.ids_equal_whole",
                  "a run that expects an error cannot also expect every rank's ids checked; remove one of them"));
}

std::string stem_of(std::string_view source) {
  std::filesystem::path p{std::string(source)};
  return excerpt(p.stem().string(), kEchoedValueBytes);  // printed in tables
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
  // Every error of the file, for one report.
  FieldErrors e;
  e.add(r.check_keys(root, "", kScenarioKeys));
  Scenario s;
  s.source = std::string(source_name);
  s.name = stem_of(source_name);
  if (root["name"]) e.set(s.name, r.name(root["name"], "name", kMaxNameBytes));
  if (root["description"]) e.set(s.description, r.text(root["description"], "description"));

  // The deployment part, by the deployment parser; every other top-level
  // key was checked above, against the scenario's own list.
  std::vector<std::string> others;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const YAML::Node key = it->first;
    if (key.IsScalar() && std::none_of(std::begin(kDeploymentKeys), std::end(kDeploymentKeys),
                                       [&](const char* d) { return key.Scalar() == d; }))
      others.push_back(key.Scalar());
  }
  s.deployment = parse_deployment_fields(root, source_name, others, e);

  if (root["seed"]) e.set(s.seed, r.seed(root["seed"], "seed"));
  if (const YAML::Node faults = root["faults"]; faults && faults.IsScalar()) {
    if (faults.Scalar() == "drawn")
      s.faults_drawn = true;
    else
      e.add(r.error(faults, "faults",
                    fmt::format("'{}' is neither `drawn` nor a section; write faults: drawn (the seed draws them) or "
                                "faults: {{planned: [{{site: import, rank: 1}}]}}",
                                excerpt(faults.Scalar()))));
  } else if (faults) {
    parse_faults(r, faults, s, e);
  }
  if (root["lookup"]) parse_lookup(r, root["lookup"], s.lookup, e);
  if (s.faults_drawn && root["expect"])
    e.add(r.error(root["expect"], "expect",
                  "a scenario whose faults are drawn cannot know its outcome; remove expect (the swarm's rules are "
                  "checked), or write the drawn case out with `engramlab scenario run --emit FILE` and keep that"));
  else if (!root["expect"] && !s.faults_drawn)
    e.add(r.error(root, "expect", "missing; a scenario states what must happen, e.g. expect: {placement: host_shared}"));
  else if (root["expect"])
    parse_expect(r, root["expect"], s.expect, e);
  // Checks across sections, once each field reads: with an error above
  // they could only repeat it (a layout.dp that did not read is no count
  // to compare with).
  if (!e.empty()) return e.status();
  if (s.expect.lookup_equal && !s.lookup.run)
    e.add(r.error(root["expect"]["lookup_equal"], "expect.lookup_equal",
                  "lookup.run is false, so no lookup is compared; set lookup.run: true or remove lookup_equal"));
  if (s.expect.ids_equal_whole && (!s.lookup.run || (!s.lookup.steps.any() && s.deployment.layout.prefill_cp < 2)))
    e.add(r.error(root["expect"]["ids_equal_whole"], "expect.ids_equal_whole",
                  "nothing is hashed across steps or CP ranks here: add lookup.steps (with lookup.run: true) or set "
                  "layout.prefill_cp above 1, or remove ids_equal_whole"));
  if (!s.expect.step_time_us_max.empty() && !s.lookup.run)
    e.add(r.error(root["expect"]["step_time_us_max"], "expect.step_time_us_max",
                  "lookup.run is false, so no lookup step is timed; set lookup.run: true or remove step_time_us_max"));
  if (s.lookup.steps.any() && !s.lookup.run)
    e.add(r.error(root["lookup"]["steps"], "lookup.steps",
                  "lookup.run is false, so no step runs; set lookup.run: true or remove the steps"));
  if (root["lookup"]) check_lookup_steps(r, root["lookup"], s.lookup.steps, s.deployment, e);
  for (size_t b = 0; b < s.lookup.batches.size(); ++b) {
    const ScenarioBatch& batch = s.lookup.batches[b];
    const int dp = s.deployment.layout.dp;
    const YAML::Node at = root["lookup"]["batches"][b];
    if (static_cast<int>(batch.tokens_by_replica.size()) != dp)
      e.add(r.error(at["tokens"], fmt::format("lookup.batches[{}].tokens", b),
                    fmt::format("{} entries for {} DP replicas (layout.dp); give one token count per replica",
                                batch.tokens_by_replica.size(), dp)));
    for (int replica : batch.dead_replicas)
      if (replica >= dp)
        e.add(r.error(at["dead"], fmt::format("lookup.batches[{}].dead", b),
                      fmt::format("replica {} does not exist; replicas are 0..{} (layout.dp is {})", replica, dp - 1,
                                  dp)));
  }
  // A fault for a rank the layout does not have would load, then fail the
  // run as a scenario error with no line to point at.
  const int world = s.deployment.layout.world_size();
  for (size_t i = 0; i < s.planned_faults.size(); ++i) {
    const int rank = s.planned_faults[i].rank;
    if (world > 0 && rank >= world)
      e.add(r.error(root["faults"]["planned"][i]["rank"], fmt::format("faults.planned[{}].rank", i),
                    fmt::format("rank {} is outside the world; ranks are 0..{} (layout.tp x layout.dp = {})", rank,
                                world - 1, world)));
  }
  const YAML::Node step_times = root["expect"] ? root["expect"]["step_time_us_max"] : YAML::Node();
  for (size_t i = 0; i < s.expect.step_time_us_max.size(); ++i) {
    const int last = s.expect.step_time_us_max[i].last_rank;
    if (world > 0 && last >= world)
      e.add(r.error(step_times[i]["ranks"], fmt::format("expect.step_time_us_max[{}].ranks", i),
                    fmt::format("rank {} is outside the world; ranks are 0..{} (layout.tp x layout.dp = {})", last,
                                world - 1, world)));
  }
  if (!e.empty()) return e.status();
  return s;
}

Result<Scenario> parse_scenario_text(std::string_view text, std::string_view source_name) {
  ENGRAM_ASSIGN_OR_RETURN(YAML::Node root, load_yaml_text(text, source_name));
  return parse_scenario(root, source_name);
}

Result<Scenario> load_scenario_file(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "scenario"));
  ENGRAM_ASSIGN_OR_RETURN(Scenario s, parse_scenario_text(text, path));
  s.source_text = std::move(text);
  return s;
}

Result<ScenarioFiles> scenario_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return ScenarioFiles{{path}, {}};
  if (!fs::is_directory(path, ec))
    return invalid_argument(fmt::format("scenario: '{}' is neither a file nor a directory; check the path", excerpt(path, 200)));
  ScenarioFiles out;
  // Every call given an error_code: an entry whose type cannot be read (a
  // symlink loop, a link to nowhere) would otherwise throw.
  fs::directory_iterator it(path, ec);
  for (const fs::directory_iterator end; !ec && it != end; it.increment(ec)) {
    const fs::path& entry = it->path();
    const std::string ext = entry.extension().string();
    if (ext != ".yaml" && ext != ".yml") continue;
    std::error_code type_ec;
    const fs::file_status status = it->status(type_ec);
    const std::string shown = excerpt(entry.string(), 200);
    if (type_ec) {
      out.skipped.push_back(fmt::format("'{}': {}; skipped", shown, type_ec.message()));
    } else if (!fs::is_regular_file(status)) {
      out.skipped.push_back(fmt::format("'{}': not a regular file; skipped", shown));
    } else {
      out.files.push_back(entry.string());
    }
  }
  if (ec) return invalid_argument(fmt::format("scenario: cannot list '{}': {}", excerpt(path, 200), ec.message()));
  std::sort(out.files.begin(), out.files.end());
  std::sort(out.skipped.begin(), out.skipped.end());
  if (out.files.empty()) {
    std::string why;
    for (const std::string& s : out.skipped) why += "; " + s;
    return invalid_argument(fmt::format("scenario: '{}' holds no readable *.yaml files{}; give a scenario file or "
                                        "directory",
                                        excerpt(path, 200), why));
  }
  return out;
}

}  // namespace engram::harness
