#include "core/base/fixes_once.h"
#include "core/report/plan_report.h"

#include <fmt/format.h>

#include "core/base/text_table.h"
#include "core/plan/memory_margins.h"

#include <algorithm>
#include <vector>
#include <tuple>
#include <map>

#include "core/base/json_output.h"
#include "core/deployment/shard_groups.h"
#include "core/engines/engine_profile.h"
#include "core/base/size_text.h"
#include "core/base/text_list.h"
#include "core/base/units.h"

namespace engram {
namespace {

std::string dp_shared_text(const DpSharedMemoryResolution& r, const EngramConfig& c) {
  std::string written = c.dp_shared_memory ? (*c.dp_shared_memory ? "true" : "false") : "unset";
  return fmt::format("{} -> {}", written, r.enabled ? "true (enabled)" : "false (disabled)");
}

// One row per group of hosts whose figures are all alike: a 16-rack plan is
// a handful of rows, not 288. The label names the first hosts and the count.
struct HostRow {
  HostMemory first;
  std::string label;
};

std::vector<HostRow> host_rows(const std::vector<HostMemory>& hosts) {
  using Key = std::tuple<int, uint64_t, uint64_t, int64_t, uint64_t, uint64_t, int, uint64_t>;
  std::map<Key, size_t> index_of;
  std::vector<std::pair<HostMemory, std::vector<std::string>>> groups;
  for (const HostMemory& h : hosts) {
    Key key{h.rank_count,        h.gpu_memory_bytes, h.hbm_bytes_per_gpu_max, h.kv_cache_left_bytes_min,
            h.shm_bytes,         h.host_table_bytes, h.table_copies,          h.host_memory_bytes};
    auto [it, inserted] = index_of.emplace(key, groups.size());
    if (inserted) groups.push_back({h, {}});
    groups[it->second].second.push_back(h.name);
  }
  std::vector<HostRow> rows;
  for (auto& [first, names] : groups) {
    std::string label = names.size() == 1 ? names.front()
                                          : fmt::format("{} hosts: {}", names.size(), join_limited(names, 2));
    rows.push_back({first, std::move(label)});
  }
  return rows;
}

// How a host placement cuts the heads over TP (and the Engram DP group).
std::string host_heads_text(const PlacementGroupSummary& g, const ParallelLayout& layout, const ModelSummary& m) {
  const PlacementOps& ops = placement_ops(g.placement);
  if (ops.report_heads == nullptr || m.heads_per_table.empty()) return "";
  return ops.report_heads(m.heads_per_table.front(), layout.tp, g.group_size);
}

}  // namespace

std::string format_defaults_used(const std::vector<DefaultUsed>& defaults) {
  if (defaults.empty()) return "";
  std::string out = "\ndefaults used (not written by you):\n";
  for (const DefaultUsed& u : defaults) out += fmt::format("  {}: {} ({})\n", u.field, u.value, u.source);
  return out;
}

std::string with_thousands(uint64_t value) {
  std::string digits = fmt::format("{}", value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// What the KV cache left holds in tokens and requests, where the model
// file gives its KV bytes per token; "" otherwise.
static std::string kv_tokens_text(const PlanResult& plan) {
  if (plan.model.kv_bytes_per_token == 0 || plan.ranks.empty()) return "";
  int64_t tokens_min = plan.ranks.front().memory.kv_cache_left_tokens;
  int64_t requests_min = plan.ranks.front().memory.max_concurrency;
  for (const RankPlan& r : plan.ranks) {
    tokens_min = std::min(tokens_min, r.memory.kv_cache_left_tokens);
    requests_min = std::min(requests_min, r.memory.max_concurrency);
  }
  std::string out = fmt::format("KV cache left in tokens: {} per GPU at least ({} per token, the model's "
                                "serving.kv_bytes_per_token)",
                                with_thousands(static_cast<uint64_t>(tokens_min)),
                                format_size_short(plan.model.kv_bytes_per_token));
  if (const auto length = plan.deployment.engine.context_length_tokens) {
    out += fmt::format("; maximum concurrency at {} tokens per request: {}", with_thousands(static_cast<uint64_t>(*length)),
                       with_thousands(static_cast<uint64_t>(requests_min)));
  } else {
    out += "; give --context-length for the maximum concurrency";
  }
  return out + "\n";
}


std::string format_plan_report(const PlanResult& plan) {
  const Deployment& d = plan.deployment;
  const ModelSummary& m = plan.model;
  std::string out;
  out += fmt::format("model: {}: {} tables (layers", m.name, m.layer_ids.size());
  for (size_t t = 0; t < m.layer_ids.size(); ++t) out += fmt::format("{}{}", t ? ", " : " ", m.layer_ids[t]);
  out += fmt::format("), {} B per row\n", m.row_bytes);
  for (size_t t = 0; t < m.layer_ids.size(); ++t) {
    out += fmt::format("  layer {}: {} heads, {} rows, {} B ({})\n", m.layer_ids[t], m.heads_per_table[t],
                       with_thousands(static_cast<uint64_t>(m.rows_per_table[t])), with_thousands(m.table_bytes[t]),
                       format_gib(m.table_bytes[t]));
  }
  out += fmt::format("  all tables: {} B ({})\n", with_thousands(m.table_bytes_total), format_gib(m.table_bytes_total));
  out += fmt::format("  hash ids: compressed vocabulary {}, pad id {}, DEAD tokens {}, seed {}\n",
                     with_thousands(static_cast<uint64_t>(m.compressed_vocab_size)), m.pad_id, m.dead_tokens,
                     m.hash_seed);
  int hosts_used = static_cast<int>(plan.hosts.size());
  out += fmt::format("layout: tp {} x dp {} = {} rank{} on {} host{}; ep {}, elastic EP {}, prefill cp {}\n",
                     d.layout.tp, d.layout.dp, d.layout.world_size(), d.layout.world_size() == 1 ? "" : "s",
                     hosts_used, hosts_used == 1 ? "" : "s",
                     d.layout.ep, d.layout.elastic_ep ? "on" : "off", d.layout.prefill_cp);
  {
    // The engine whose rules planned this (core/engines/).
    const EngineProfile& engine = engine_profile_of(d.engine);
    out += fmt::format("engine: {} (tables split over TP by {} on the GPU, by {} in host memory; scale bytes {}; "
                       "from {}; version {})\n",
                       profile_label(engine), tp_split_name(engine.device_tp_split), tp_split_name(engine.host_tp_split),
                       scale_bytes_text(engine), engine.source, engine.version.ref);
  }
  out += fmt::format("config: cpu_offload {}, peer_shards {}, dp_shared_memory {}, shard_group {}, "
                     "tokens_per_rank_max {}, sequence_parallel {}\n",
                     d.config.cpu_offload ? "on" : "off", d.config.peer_shards ? "on" : "off",
                     dp_shared_text(plan.dp_shared_memory, d.config), shard_group_name(d.config.shard_group),
                     d.config.tokens_per_rank_max, d.config.sequence_parallel ? "on" : "off");
  if (!d.config.placement.empty()) out += fmt::format("config: placement {} as written (the rules are not asked)\n", d.config.placement);

  out += "\nplacement:\n";
  for (const PlacementGroupSummary& g : plan.groups) {
    out += fmt::format("  ranks {}: {}, {} group{} of {} ({})", g.ranks_text, placement_name(g.placement),
                       g.group_count, g.group_count == 1 ? "" : "s", g.group_size,
                       placement_group_text(placement_ops(g.placement)));
    if (g.handle_type) out += fmt::format(", handle type {}", handle_type_name(*g.handle_type));
    out += host_heads_text(g, d.layout, m);
    out += "\n";
  }

  out += format_defaults_used(d.defaults_used);

  out += "\nwarnings:";
  if (plan.warnings.empty()) out += " none";
  out += "\n";
  // A fix that several warnings and reasons end in is said once, numbered,
  // where it first comes, and referenced after (one numbering for both lists).
  std::vector<std::string> texts;
  for (const Warning& w : plan.warnings) texts.push_back(w.text);
  texts.insert(texts.end(), plan.reasons.begin(), plan.reasons.end());
  texts = say_fixes_once(texts);
  const size_t warnings = plan.warnings.size();
  for (size_t i = 0; i < warnings; ++i) out += fmt::format("  [{}] {}\n", plan.warnings[i].key, texts[i]);

  out += "\nwhy:\n";
  for (size_t i = warnings; i < texts.size(); ++i) out += fmt::format("  - {}\n", texts[i]);

  out += fmt::format("\nmemory per GPU (by rank group; KV cache left = GPU memory x {:.2f} - tables - buffer - "
                     "reserved {}):\n",
                     d.engine.gpu_memory_fraction,
                     d.engine.gpu_reserved_bytes ? format_gib(*d.engine.gpu_reserved_bytes) : "(not counted)");
  out += fmt::format("  {:<16} {:<18} {:>14} {:>14} {:>14} {:>14} {:>18}\n", "ranks", "placement", "GPU memory",
                     "HBM tables", "HBM buffer", "KV cache left", "host per rank");
  for (const PlacementGroupSummary& g : plan.groups) {
    // Members differ only in head-shard bytes; show the largest.
    const RankPlan& first = plan.ranks[static_cast<size_t>(g.ranks.front())];
    uint64_t host_max = 0, mapped_max = 0;
    int64_t kv_min = first.memory.kv_cache_left_bytes;
    for (int r : g.ranks) {
      const RankMemory& rm = plan.ranks[static_cast<size_t>(r)].memory;
      host_max = std::max(host_max, rm.host_private_bytes);
      mapped_max = std::max(mapped_max, rm.host_shared_mapped_bytes);
      kv_min = std::min(kv_min, rm.kv_cache_left_bytes);
    }
    // A shared copy's TP slice is mapped, not allocated: the node holds it once.
    std::string host_text = mapped_max > 0 ? "maps " + format_gib(mapped_max)
                                           : (host_max ? format_gib(host_max) : std::string("0"));
    out += fmt::format("  {:<16} {:<18} {:>14} {:>14} {:>14} {:>14} {:>18}\n", g.ranks_text,
                       placement_name(g.placement), format_gib(first.memory.gpu_memory_bytes),
                       format_gib(first.memory.hbm_table_bytes), format_gib(first.memory.hbm_buffer_bytes),
                       format_signed_gib(kv_min), host_text);
  }
  out += kv_tokens_text(plan);
  out += "\nmemory per host (hosts alike in one row):\n";
  out += fmt::format("  {:<24} {:>5} {:>16} {:>16} {:>14} {:>16} {:>7} {:>14}\n", "host", "ranks", "HBM/GPU max",
                     "KV left/GPU min", "/dev/shm used", "host tables", "copies", "host RAM");
  for (const HostRow& row : host_rows(plan.hosts)) {
    const HostMemory& h = row.first;
    out += fmt::format("  {:<24} {:>5} {:>16} {:>16} {:>14} {:>16} {:>7} {:>14}\n", row.label, h.rank_count,
                       format_gib(h.hbm_bytes_per_gpu_max), format_signed_gib(h.kv_cache_left_bytes_min),
                       format_gib(h.shm_bytes), format_gib(h.host_table_bytes), h.table_copies,
                       h.host_memory_bytes ? format_gib(h.host_memory_bytes) : std::string("?"));
  }
  out += format_memory_verdict(plan);
  return out;
}

std::string format_memory_verdict(const PlanResult& plan) {
  std::string out = "\nmemory verdict (each limit the host memory is held against: what the plan charges to it and "
                    "the headroom left; warned below the floor):\n";
  const std::vector<MemoryMargin> margins = memory_margins(plan);
  if (margins.empty()) {
    out += "  no host memory is used by the tables, and no limit is written\n";
  } else {
    std::vector<std::vector<std::string>> rows = {{"limit", "where", "size", "charged", "headroom", "floor"}};
    for (const MemoryMargin& m : margins) {
      const std::string left = format_signed_gib(m.headroom_bytes);
      rows.push_back({m.limit, m.scope, format_gib(m.limit_bytes), m.charged,
                      m.headroom_bytes < 0                                        ? left + " (over)"
                      : static_cast<uint64_t>(m.headroom_bytes) < m.floor_bytes ? left + " (low)"
                                                                                 : left,
                      format_gib(m.floor_bytes)});
    }
    const std::string table = format_text_table(rows, 60, "  ");
    size_t start = 0;
    while (start < table.size()) {
      const size_t end = table.find('\n', start);
      out += "  " + table.substr(start, end - start + 1);
      start = end + 1;
    }
  }
  for (const std::string& n : memory_not_counted(plan)) out += fmt::format("  not counted: {}\n", n);
  return out;
}

Json memory_verdict_json(const PlanResult& plan) {
  Json margins = Json::array();
  for (const MemoryMargin& m : memory_margins(plan)) {
    margins.push_back({{"limit", m.limit},
                       {"where", m.scope},
                       {"limit_bytes", m.limit_bytes},
                       {"charged_bytes", m.charged_bytes},
                       {"charged", m.charged},
                       {"headroom_bytes", m.headroom_bytes},
                       {"floor_bytes", m.floor_bytes}});
  }
  return Json{{"margins", std::move(margins)}, {"not_counted", memory_not_counted(plan)}};
}

Json plan_json(const PlanResult& plan) {
  const Deployment& d = plan.deployment;
  const ModelSummary& m = plan.model;
  Json j = json_document("plan");
  Json& model = j["model"];
  model["name"] = m.name;
  model["row_bytes"] = m.row_bytes;
  model["table_bytes_total"] = m.table_bytes_total;
  model["row_format"] = m.row_format;
  model["file"] = m.source_path.empty() ? Json(nullptr) : Json(m.source_path);
  model["kv_bytes_per_token"] = m.kv_bytes_per_token ? Json(m.kv_bytes_per_token) : Json(nullptr);
  model["tables"] = Json::array();
  model["hash"] = {{"compressed_vocab_size", m.compressed_vocab_size},
                   {"pad_id", m.pad_id},
                   {"dead_tokens", m.dead_tokens},
                   {"seed", m.hash_seed}};
  for (size_t t = 0; t < m.layer_ids.size(); ++t) {
    model["tables"].push_back({{"layer_id", m.layer_ids[t]},
                               {"heads", m.heads_per_table[t]},
                               {"rows", m.rows_per_table[t]},
                               {"table_bytes", m.table_bytes[t]}});
  }

  j["layout"] = {{"tp", d.layout.tp}, {"dp", d.layout.dp}, {"ep", d.layout.ep}, {"elastic_ep", d.layout.elastic_ep},
                 {"prefill_cp", d.layout.prefill_cp}, {"world_size", d.layout.world_size()}};
  Json& config = j["config"];
  config["cpu_offload"] = d.config.cpu_offload;
  config["peer_shards"] = d.config.peer_shards;
  // null: unset, as written.
  config["dp_shared_memory"] = d.config.dp_shared_memory ? Json(*d.config.dp_shared_memory) : Json(nullptr);
  config["shard_group"] = shard_group_name(d.config.shard_group);
  config["tokens_per_rank_max"] = d.config.tokens_per_rank_max;
  config["sequence_parallel"] = d.config.sequence_parallel;
  if (!d.config.placement.empty()) config["placement"] = d.config.placement;  // only where written: the rules decide otherwise
  j["engine"] = {{"name", profile_label(engine_profile_of(d.engine))},
                 {"version", engine_profile_of(d.engine).version.ref},
                 {"tp_split_device", tp_split_name(engine_profile_of(d.engine).device_tp_split)},
                 {"scale_byte_rule", scale_byte_rule_name(engine_profile_of(d.engine).scale_byte_rule)},
                 {"gpu_memory_fraction", d.engine.gpu_memory_fraction},
                 {"gpu_reserved_bytes", d.engine.gpu_reserved_bytes ? Json(*d.engine.gpu_reserved_bytes) : Json(nullptr)},
                 {"gpu_reserved_from_model", d.engine.reserved_from_model},
                 {"context_length", d.engine.context_length_tokens ? Json(*d.engine.context_length_tokens) : Json(nullptr)}};
  // What the engine holds beside the tables (core/engines: counted bytes, or named).
  j["engine_extra_bytes"] = plan.engine_extra.bytes_per_host;
  j["not_counted"] = plan.engine_extra.not_counted;
  j["decided_by"] = Json::array();
  for (const DecidedBy& e : plan.decided_by)
    j["decided_by"].push_back({{"decision", e.decision}, {"engine", e.engine}, {"rule", e.rule_key},
                               {"rule_text", e.rule_text}, {"source", e.source}});
  j["defaults_used"] = Json::array();
  for (const DefaultUsed& u : d.defaults_used)
    j["defaults_used"].push_back({{"field", u.field}, {"value", u.value}, {"source", u.source}});

  j["dp_shared_memory"] = {{"enabled", plan.dp_shared_memory.enabled},
                           {"explicit", plan.dp_shared_memory.is_explicit},
                           {"reason", plan.dp_shared_memory.reason}};

  j["groups"] = Json::array();
  for (const PlacementGroupSummary& g : plan.groups) {
    Json group = {{"placement", placement_name(g.placement)}, {"ranks", g.ranks_text},
                  {"group_size", g.group_size},               {"group_count", g.group_count}};
    group["handle_type"] = g.handle_type ? Json(handle_type_name(*g.handle_type)) : Json(nullptr);
    group["reason"] = g.reason;
    j["groups"].push_back(std::move(group));
  }
  j["reasons"] = plan.reasons;

  j["ranks"] = Json::array();
  for (const RankPlan& r : plan.ranks) {
    Json rank = {{"rank", r.rank}, {"tp_rank", r.tp_rank}, {"dp_rank", r.dp_rank}};
    rank["host"] = d.hosts[static_cast<size_t>(r.host)].name;
    rank["placement"] = placement_name(r.placement);
    const bool device = placement_ops(r.placement).group == PlacementGroup::kShardGroup;
    rank["node_local_group"] = device ? Json(nullptr) : Json(r.node_local_group);
    rank["node_local_group_size"] = device ? Json(nullptr) : Json(r.node_local_group_size);
    rank["node_local_index"] = device ? Json(nullptr) : Json(r.node_local_index);
    rank["shard_group"] = device ? Json(r.shard_group) : Json(nullptr);
    rank["shard_group_size"] = device ? Json(r.shard_group_size) : Json(nullptr);
    rank["shard_index"] = device ? Json(r.shard_index) : Json(nullptr);
    rank["gpu_memory_bytes"] = r.memory.gpu_memory_bytes;
    rank["hbm_table_bytes"] = r.memory.hbm_table_bytes;
    rank["hbm_buffer_bytes"] = r.memory.hbm_buffer_bytes;
    rank["kv_budget_bytes"] = r.memory.kv_budget_bytes;
    rank["gpu_reserved_bytes"] = r.memory.gpu_reserved_bytes;
    rank["kv_cache_left_bytes"] = r.memory.kv_cache_left_bytes;
    rank["kv_cache_left_tokens"] = r.memory.kv_cache_left_tokens >= 0 ? Json(r.memory.kv_cache_left_tokens) : Json(nullptr);
    rank["max_concurrency"] = r.memory.max_concurrency >= 0 ? Json(r.memory.max_concurrency) : Json(nullptr);
    rank["host_private_bytes"] = r.memory.host_private_bytes;
    rank["host_shared_mapped_bytes"] = r.memory.host_shared_mapped_bytes;
    j["ranks"].push_back(std::move(rank));
  }

  j["hosts"] = Json::array();
  for (const HostMemory& h : plan.hosts) {
    j["hosts"].push_back({{"name", h.name},
                          {"ranks", h.rank_count},
                          {"gpu_memory_bytes", h.gpu_memory_bytes},
                          {"host_memory_bytes", h.host_memory_bytes ? Json(h.host_memory_bytes) : Json(nullptr)},
                          {"hbm_bytes_per_gpu_max", h.hbm_bytes_per_gpu_max},
                          {"kv_cache_left_bytes_min", h.kv_cache_left_bytes_min},
                          {"shm_bytes", h.shm_bytes},
                          {"host_table_bytes", h.host_table_bytes},
                          {"table_copies", h.table_copies}});
  }
  j["memory_verdict"] = memory_verdict_json(plan);
  j["warnings"] = warnings_json(plan.warnings);
  j["error"] = nullptr;
  return j;
}

}  // namespace engram
