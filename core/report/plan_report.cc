#include "core/report/plan_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/json_writer.h"
#include "core/deployment/shard_groups.h"
#include "core/base/size_text.h"
#include "core/base/units.h"

namespace engram {
namespace {

std::string signed_gib(int64_t bytes) {
  return bytes < 0 ? "-" + format_gib(static_cast<uint64_t>(-bytes)) : format_gib(static_cast<uint64_t>(bytes));
}

std::string dp_shared_text(const DpSharedMemoryResolution& r, const EngramConfig& c) {
  std::string written = c.dp_shared_memory ? (*c.dp_shared_memory ? "true" : "false") : "unset";
  return fmt::format("{} -> {}", written, r.enabled ? "true (enabled)" : "false (disabled)");
}

}  // namespace

std::string with_thousands(uint64_t value) {
  std::string digits = fmt::format("{}", value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
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
  int hosts_used = static_cast<int>(plan.hosts.size());
  out += fmt::format("layout: tp {} x dp {} = {} ranks on {} host{}; ep {}, elastic EP {}, prefill cp {}\n",
                     d.layout.tp, d.layout.dp, d.layout.world_size(), hosts_used, hosts_used == 1 ? "" : "s",
                     d.layout.ep, d.layout.elastic_ep ? "on" : "off", d.layout.prefill_cp);
  out += fmt::format("config: cpu_offload {}, peer_shards {}, dp_shared_memory {}, shard_group {}, "
                     "tokens_per_rank_max {}\n",
                     d.config.cpu_offload ? "on" : "off", d.config.peer_shards ? "on" : "off",
                     dp_shared_text(plan.dp_shared_memory, d.config), shard_group_name(d.config.shard_group),
                     d.config.tokens_per_rank_max);

  out += "\nplacement:\n";
  for (const PlacementGroupSummary& g : plan.groups) {
    const bool dev = is_device_placement(g.placement);
    out += fmt::format("  ranks {}: {}, {} group{} of {} ({})", g.ranks_text, placement_name(g.placement),
                       g.group_count, g.group_count == 1 ? "" : "s", g.group_size,
                       dev ? "row shards" : "node-local DP group");
    if (g.handle_type) out += fmt::format(", handle type {}", handle_type_name(*g.handle_type));
    out += "\n";
  }

  out += "\nwarnings:";
  if (plan.warnings.empty()) out += " none";
  out += "\n";
  for (const Warning& w : plan.warnings) out += fmt::format("  [{}] {}\n", w.key, w.text);

  out += "\nwhy:\n";
  for (const std::string& r : plan.reasons) out += fmt::format("  - {}\n", r);

  out += "\nmemory per GPU (by rank group):\n";
  out += fmt::format("  {:<16} {:<18} {:>14} {:>14} {:>14} {:>14} {:>16}\n", "ranks", "placement", "GPU memory",
                     "HBM tables", "HBM buffer", "KV cache left", "host per rank");
  for (const PlacementGroupSummary& g : plan.groups) {
    // Members differ only in head-shard bytes; show the largest.
    const RankPlan& first = plan.ranks[static_cast<size_t>(g.ranks.front())];
    uint64_t host_max = 0;
    int64_t kv_min = first.memory.kv_cache_left_bytes;
    for (int r : g.ranks) {
      const RankMemory& rm = plan.ranks[static_cast<size_t>(r)].memory;
      host_max = std::max(host_max, rm.host_private_bytes);
      kv_min = std::min(kv_min, rm.kv_cache_left_bytes);
    }
    std::string host_text = first.placement == Placement::kHostShared
                                ? "0 (maps shared)"
                                : (host_max ? format_gib(host_max) : std::string("0"));
    out += fmt::format("  {:<16} {:<18} {:>14} {:>14} {:>14} {:>14} {:>16}\n", g.ranks_text,
                       placement_name(g.placement), format_gib(first.memory.gpu_memory_bytes),
                       format_gib(first.memory.hbm_table_bytes), format_gib(first.memory.hbm_buffer_bytes),
                       signed_gib(kv_min), host_text);
  }
  out += "\nmemory per host:\n";
  out += fmt::format("  {:<20} {:>5} {:>16} {:>16} {:>14} {:>16} {:>7}\n", "host", "ranks", "HBM/GPU max",
                     "KV left/GPU min", "/dev/shm used", "host tables", "copies");
  for (const HostMemory& h : plan.hosts) {
    out += fmt::format("  {:<20} {:>5} {:>16} {:>16} {:>14} {:>16} {:>7}\n", h.name, h.rank_count,
                       format_gib(h.hbm_bytes_per_gpu_max), signed_gib(h.kv_cache_left_bytes_min),
                       format_gib(h.shm_bytes), format_gib(h.host_table_bytes), h.table_copies);
  }
  return out;
}

std::string plan_to_json(const PlanResult& plan) {
  const Deployment& d = plan.deployment;
  const ModelSummary& m = plan.model;
  JsonWriter j;
  j.begin_object();
  j.key("model").begin_object();
  j.key("name").value(m.name);
  j.key("row_bytes").value(m.row_bytes);
  j.key("table_bytes_total").value(m.table_bytes_total);
  j.key("tables").begin_array();
  for (size_t t = 0; t < m.layer_ids.size(); ++t) {
    j.begin_object();
    j.key("layer_id").value(m.layer_ids[t]);
    j.key("heads").value(m.heads_per_table[t]);
    j.key("rows").value(static_cast<int64_t>(m.rows_per_table[t]));
    j.key("table_bytes").value(m.table_bytes[t]);
    j.end_object();
  }
  j.end_array().end_object();

  j.key("layout").begin_object();
  j.key("tp").value(d.layout.tp).key("dp").value(d.layout.dp).key("ep").value(d.layout.ep);
  j.key("elastic_ep").value(d.layout.elastic_ep).key("prefill_cp").value(d.layout.prefill_cp);
  j.key("world_size").value(d.layout.world_size());
  j.end_object();

  j.key("config").begin_object();
  j.key("cpu_offload").value(d.config.cpu_offload).key("peer_shards").value(d.config.peer_shards);
  j.key("dp_shared_memory");
  if (d.config.dp_shared_memory) j.value(*d.config.dp_shared_memory);
  else j.value("unset");
  j.key("shard_group").value(shard_group_name(d.config.shard_group));
  j.key("tokens_per_rank_max").value(d.config.tokens_per_rank_max);
  j.end_object();

  j.key("dp_shared_memory").begin_object();
  j.key("enabled").value(plan.dp_shared_memory.enabled);
  j.key("explicit").value(plan.dp_shared_memory.is_explicit);
  j.key("reason").value(plan.dp_shared_memory.reason);
  j.end_object();

  j.key("groups").begin_array();
  for (const PlacementGroupSummary& g : plan.groups) {
    j.begin_object();
    j.key("placement").value(placement_name(g.placement));
    j.key("ranks").value(g.ranks_text);
    j.key("group_size").value(g.group_size).key("group_count").value(g.group_count);
    j.key("handle_type");
    if (g.handle_type) j.value(handle_type_name(*g.handle_type));
    else j.null();
    j.key("reason").value(g.reason);
    j.end_object();
  }
  j.end_array();

  j.key("warnings").begin_array();
  for (const Warning& w : plan.warnings) j.begin_object().key("key").value(w.key).key("text").value(w.text).end_object();
  j.end_array();
  j.key("reasons").begin_array();
  for (const std::string& r : plan.reasons) j.value(r);
  j.end_array();

  j.key("ranks").begin_array();
  for (const RankPlan& r : plan.ranks) {
    j.begin_object();
    j.key("rank").value(r.rank).key("tp_rank").value(r.tp_rank).key("dp_rank").value(r.dp_rank);
    j.key("host").value(d.hosts[static_cast<size_t>(r.host)].name);
    j.key("placement").value(placement_name(r.placement));
    j.key("node_local_group").value(r.node_local_group).key("node_local_group_size").value(r.node_local_group_size);
    j.key("node_local_index").value(r.node_local_index);
    j.key("shard_group").value(r.shard_group).key("shard_group_size").value(r.shard_group_size);
    j.key("shard_index").value(r.shard_index);
    j.key("gpu_memory_bytes").value(r.memory.gpu_memory_bytes);
    j.key("hbm_table_bytes").value(r.memory.hbm_table_bytes);
    j.key("hbm_buffer_bytes").value(r.memory.hbm_buffer_bytes);
    j.key("kv_cache_left_bytes").value(static_cast<int64_t>(r.memory.kv_cache_left_bytes));
    j.key("host_private_bytes").value(r.memory.host_private_bytes);
    j.key("host_shared_mapped_bytes").value(r.memory.host_shared_mapped_bytes);
    j.end_object();
  }
  j.end_array();

  j.key("hosts").begin_array();
  for (const HostMemory& h : plan.hosts) {
    j.begin_object();
    j.key("name").value(h.name).key("ranks").value(h.rank_count);
    j.key("gpu_memory_bytes").value(h.gpu_memory_bytes);
    j.key("hbm_bytes_per_gpu_max").value(h.hbm_bytes_per_gpu_max);
    j.key("kv_cache_left_bytes_min").value(static_cast<int64_t>(h.kv_cache_left_bytes_min));
    j.key("shm_bytes").value(h.shm_bytes);
    j.key("host_table_bytes").value(h.host_table_bytes);
    j.key("table_copies").value(h.table_copies);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

}  // namespace engram
