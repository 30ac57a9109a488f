#include "core/report/engine_comparison.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "core/base/did_you_mean.h"
#include "core/base/size_text.h"
#include "core/base/text_excerpt.h"
#include "core/base/text_table.h"
#include "core/base/units.h"
#include "core/engines/engine_profile.h"
#include "core/model/row_format.h"
#include "core/plan/memory_fit.h"
#include "core/plan/memory_margins.h"
#include "core/plan/step_time_plan.h"

namespace engram {
namespace {

constexpr uint64_t kIdBytes = 8;   // int64 row ids
constexpr uint64_t kBf16Bytes = 2;

// The collectives one rank of `rp`'s placement runs per decode step, over
// every table of the model, from its placement's traits and the engine's
// rules of how rows come back (a model of the payload each of the rank's
// tokens brings it, not a measurement). An all-gather that keeps the rank's
// own tokens (vLLM's _gather_engram_rows) brings the group size times an
// all-to-all's bytes.
std::vector<StepCollective> step_collectives(const RankPlan& rp, const PlanResult& plan, const EngineProfile& engine) {
  const PlacementOps& ops = placement_ops(rp.placement);
  const int tp = plan.deployment.layout.tp;
  uint64_t heads = 0, heads_tp_slice = 0;
  uint64_t dim = 0;
  for (size_t t = 0; t < plan.model.heads_per_table.size(); ++t) {
    const uint64_t h = static_cast<uint64_t>(plan.model.heads_per_table[t]);
    heads += h;
    heads_tp_slice += (h + static_cast<uint64_t>(tp) - 1) / static_cast<uint64_t>(tp);
  }
  // Every table of a model has one dim: its row bytes less the FP8 scales, or bf16 values.
  dim = plan.model.row_format == "bf16" ? plan.model.row_bytes / kBf16Bytes
                                        : plan.model.row_bytes * kScaleBlock / (kScaleBlock + 1);
  const bool sp = plan.deployment.config.sequence_parallel && tp > 1;
  const bool gather_keep_own = engine.rows_back == RowsBack::kAllGatherKeepOwn;
  // The TP half of a head-split lookup: heads over TP, or under sequence
  // parallelism the engine's way of handing each TP rank its token shard.
  auto tp_half = [&](std::vector<StepCollective>& out) {
    if (tp < 2) return;
    const std::string group = fmt::format("TP group of {}", tp);
    if (!sp) out.push_back({"all-gather heads over TP", group, kBf16Bytes * heads * dim});
    else if (engine.sp_rows_back == SpRowsBack::kAllGatherKeepSlice)
      out.push_back({"all-gather over TP, each rank keeping its token slice", group, kBf16Bytes * heads * dim});
    else out.push_back({"all-to-all heads over TP", group, kBf16Bytes * heads * dim});
  };
  std::vector<StepCollective> out;
  // Device placements, and host rows cut over the row-shard group
  // (sglang_private: every member reads its rows of every token, and the
  // group sums them back).
  if (ops.needs_device || ops.group == PlacementGroup::kShardGroup) {
    const int g = ops.group == PlacementGroup::kShardGroup ? rp.shard_group_size : rp.node_local_group_size;
    if (!ops.collective_lookup || g < 2) return out;
    ENGRAM_CHECK_MSG(ops.rows_back_collective != nullptr, "a collective lookup over its group names how its rows come back");
    const std::string group = fmt::format("{} of {}", placement_group_text(ops), g);
    if (ops.trades_token_shards && gather_keep_own) {
      // vLLM main's device path: ids and rows over the Engram DP half of the
      // group (all-gather, keeping its own tokens), then heads over TP.
      const int edp = std::max(g / std::max(tp, 1), 1);
      if (edp > 1) {
        const std::string dp_group = fmt::format("Engram DP group of {}", edp);
        out.push_back({"all-gather ids", dp_group, kIdBytes * heads});
        out.push_back({"all-gather head slices, each rank keeping its own tokens", dp_group,
                       kBf16Bytes * heads_tp_slice * dim * static_cast<uint64_t>(edp)});
      }
      tp_half(out);
      return out;
    }
    // A placement that trades token shards moves each TP rank's shard alone under sequence parallelism.
    const bool shards = ops.trades_token_shards && sp;
    const uint64_t per = shards ? static_cast<uint64_t>(tp) : 1;
    out.push_back({"all-gather ids", group, kIdBytes * heads / per});
    out.push_back({shards ? std::string(ops.rows_back_collective) + " of each TP rank's token shard"
                          : std::string(ops.rows_back_collective),
                   group, kBf16Bytes * heads * dim / per});
    return out;
  }
  if (ops.collective_lookup && rp.node_local_group_size > 1) {
    const uint64_t g = static_cast<uint64_t>(rp.node_local_group_size);
    const std::string group = fmt::format("node-local DP group of {}", g);
    out.push_back({"all-gather ids", group, kIdBytes * heads_tp_slice});
    if (gather_keep_own)
      out.push_back({"all-gather rows, each rank keeping its own tokens", group, kBf16Bytes * heads_tp_slice * dim * g});
    else out.push_back({"all-to-all rows back", group, kBf16Bytes * heads_tp_slice * dim});
  }
  tp_half(out);
  return out;
}

uint64_t total_bytes(const std::vector<StepCollective>& c) {
  uint64_t sum = 0;
  for (const StepCollective& s : c) sum += s.bytes_per_token;
  return sum;
}

// The engine-specific settings (those some engine lacks and refuses by
// name), each with whether a config carries it and how it is left out.
struct EngineSetting {
  const char* name;
  bool (*carried)(const EngramConfig&);
  void (*drop)(EngramConfig&);
};
constexpr EngineSetting kEngineSettings[] = {
    {"peer_shards", [](const EngramConfig& c) { return c.peer_shards; }, [](EngramConfig& c) { c.peer_shards = false; }},
    {"thp_packing", [](const EngramConfig& c) { return c.thp_packing; }, [](EngramConfig& c) { c.thp_packing = false; }},
    {"embedding_across_dp", [](const EngramConfig& c) { return c.embedding_across_dp; },
     [](EngramConfig& c) { c.embedding_across_dp = false; }},
    {"host_layout", [](const EngramConfig& c) { return !c.host_layout.empty(); },
     [](EngramConfig& c) { c.host_layout.clear(); }},
    {"dp_shared_memory", [](const EngramConfig& c) { return c.dp_shared_memory.has_value(); },
     [](EngramConfig& c) { c.dp_shared_memory.reset(); }},
};

// The deployment without the engine-specific settings it carries, and their
// names; nothing where it carries none.
std::vector<std::string> drop_engine_settings(Deployment& d) {
  std::vector<std::string> dropped;
  for (const EngineSetting& s : kEngineSettings) {
    if (!s.carried(d.config)) continue;
    s.drop(d.config);
    dropped.push_back(s.name);
  }
  return dropped;
}

EngineColumn column_of(const Deployment& deployment, const EngineChoice& choice) {
  const EngineProfile& engine = engine_profile(choice.id, choice.variant);
  EngineColumn c;
  c.engine = choice.id;
  c.label = profile_label(engine);
  c.scale_bytes = scale_bytes_text(engine);
  for (const HostLayoutOption& l : engine.host_layouts)
    c.host_layouts += fmt::format("{}{}", c.host_layouts.empty() ? "" : ", ", l.name);
  if (!c.host_layouts.empty()) c.host_layouts += " (default " + std::string(engine.host_layouts.front().name) + ")";
  c.not_counted = engine_extra_memory(engine).not_counted;
  Deployment d = deployment;
  d.engine.profile = choice.id;
  d.engine.variant = choice.variant;
  WarningSink sink;
  Result<FitCheckedPlan> checked = plan_with_memory_fit(d, sink);
  if (!checked.is_ok() && checked.status().code() == ErrorCode::kInvalidArgument) {
    // A setting this engine lacks: its refusal, and the column planned without it.
    Deployment without = d;
    std::vector<std::string> dropped = drop_engine_settings(without);
    WarningSink again_sink;
    Result<FitCheckedPlan> again = dropped.empty() ? checked : plan_with_memory_fit(without, again_sink);
    if (again.is_ok()) {
      c.refusal = std::string(checked.status().message());
      c.planned_without = std::move(dropped);
      checked = std::move(again);
      d = std::move(without);
    }
  }
  if (!checked.is_ok() && checked.status().code() == ErrorCode::kFailedPrecondition && d.config.host_layout.empty() &&
      engine.host_layouts.size() > 1) {
    // Its default host layout cannot run here: the column as planned with
    // the first other layout it offers that can, beside the refusal.
    for (const HostLayoutOption& layout : engine.host_layouts.subspan(1)) {
      Deployment other = d;
      other.config.host_layout = layout.name;
      WarningSink other_sink;
      Result<FitCheckedPlan> planned = plan_with_memory_fit(other, other_sink);
      if (!planned.is_ok()) continue;
      c.refusal = std::string(checked.status().message());
      c.planned_with = fmt::format("host_layout: {}", layout.name);
      checked = std::move(planned);
      d = std::move(other);
      break;
    }
  }
  c.planned_from = d;
  if (!checked.is_ok()) {
    c.status = checked.status();
    return c;
  }
  c.defaults_used = checked->plan.deployment.defaults_used;
  {
    // The limit with the least headroom: what a reader checks first.
    const std::vector<MemoryMargin> margins = memory_margins(checked->plan);
    const MemoryMargin* tightest = nullptr;
    for (const MemoryMargin& m : margins)
      if (tightest == nullptr || m.headroom_bytes < tightest->headroom_bytes) tightest = &m;
    if (tightest != nullptr)
      c.tightest_limit = fmt::format("{} {}: {} left{}", tightest->limit, format_size_short(tightest->limit_bytes),
                                     format_size_short(static_cast<uint64_t>(std::max<int64_t>(tightest->headroom_bytes, 0))),
                                     tightest->headroom_bytes < 0 ? " (over)"
                                     : static_cast<uint64_t>(tightest->headroom_bytes) < tightest->floor_bytes
                                         ? fmt::format(" (below the {} floor)", format_size_short(tightest->floor_bytes))
                                         : "");
  }
  const PlanResult& plan = checked->plan;
  c.fits = checked->fits;
  c.cpu_offload = plan.deployment.config.cpu_offload;
  for (const PlacementGroupSummary& g : plan.groups) {
    const std::string name = placement_name(g.placement);
    if (c.placement.find(name) == std::string::npos)
      c.placement += (c.placement.empty() ? "" : ", ") + name;
  }
  if (plan.groups.size() > 1) {
    c.placement.clear();
    for (const PlacementGroupSummary& g : plan.groups)
      c.placement += fmt::format("{}{} (ranks {})", c.placement.empty() ? "" : ", ", placement_name(g.placement),
                                 g.ranks_text);
  }
  const bool device = !plan.ranks.empty() && is_device_placement(plan.ranks.front().placement);
  c.tp_split = tp_split_name(device ? engine.device_tp_split : engine.host_tp_split);
  c.node_local_group_min = std::numeric_limits<int>::max();
  for (const RankPlan& rp : plan.ranks) {
    c.node_local_group_min = std::min(c.node_local_group_min, rp.node_local_group_size);
    c.node_local_group_max = std::max(c.node_local_group_max, rp.node_local_group_size);
    std::vector<StepCollective> steps = step_collectives(rp, plan, engine);
    if (c.collectives.empty() || total_bytes(steps) > c.collective_bytes_per_token) {
      c.collective_bytes_per_token = total_bytes(steps);
      c.collectives = std::move(steps);
    }
  }
  if (plan.ranks.empty()) c.node_local_group_min = 0;
  c.kv_cache_left_bytes_min = std::numeric_limits<int64_t>::max();
  for (const HostMemory& h : plan.hosts) {
    c.hbm_bytes_per_gpu_max = std::max(c.hbm_bytes_per_gpu_max, h.hbm_bytes_per_gpu_max);
    c.host_table_bytes_per_node_max = std::max(c.host_table_bytes_per_node_max, h.host_table_bytes);
    c.table_copies_per_node_max = std::max(c.table_copies_per_node_max, h.table_copies);
    c.kv_cache_left_bytes_min = std::min(c.kv_cache_left_bytes_min, h.kv_cache_left_bytes_min);
  }
  if (plan.hosts.empty()) c.kv_cache_left_bytes_min = 0;
  for (const Warning& w : plan.warnings) c.warnings.push_back(w.key);
  const StepConstants constants =
      step_constants_for(plan.deployment.hosts.empty() ? "H200" : plan.deployment.hosts.front().gpu_model);
  c.step_tokens = plan.deployment.config.tokens_per_rank_max;
  c.step_time_us_p50 = plan_step_time_us_max(plan, constants, c.step_tokens);
  c.step_calibration = constants.calibration;
  return c;
}

// Wide enough for a placement name and a figure; verdicts wrap.
constexpr size_t kComparisonCellWidth = 40;
// A refusal below the table: its lines within 120 columns.
constexpr size_t kRefusalWidth = 116;

// Each engine that refused the deployment as asked, in its own words, and
// how its column was planned instead; nothing where none refused.
std::string format_comparison_refusals(std::span<const EngineColumn> columns) {
  std::string out;
  for (const EngineColumn& c : columns) {
    if (c.refusal.empty()) continue;
    const std::string instead = c.planned_with.empty()
                                    ? fmt::format("without {}", fmt::join(c.planned_without, ", "))
                                    : "with " + c.planned_with;
    const std::string label = c.label.empty() ? engine_name(c.engine) : c.label;
    out += fmt::format("{} refused the deployment as asked (its column is planned {}):\n", label, instead);
    for (const std::string& line : wrap_text(c.refusal, kRefusalWidth)) out += "  " + line + "\n";
  }
  return out;
}

// The defaults the figures rest on, each once; one only some engines took
// names them.
std::string format_comparison_defaults(std::span<const EngineColumn> columns) {
  std::vector<DefaultUsed> seen;
  std::vector<std::vector<std::string>> engines_of;
  size_t planned = 0;
  for (const EngineColumn& c : columns) {
    if (!c.status.is_ok()) continue;
    ++planned;
    for (const DefaultUsed& u : c.defaults_used) {
      size_t i = 0;
      while (i < seen.size() && !(seen[i].field == u.field && seen[i].value == u.value && seen[i].source == u.source))
        ++i;
      if (i == seen.size()) {
        seen.push_back(u);
        engines_of.emplace_back();
      }
      engines_of[i].push_back(engine_name(c.engine));
    }
  }
  if (seen.empty()) return "";
  std::string out = "\ndefaults used (not written by you):\n";
  for (size_t i = 0; i < seen.size(); ++i) {
    const std::string whose =
        engines_of[i].size() == planned ? "" : fmt::format(" [{}]", fmt::join(engines_of[i], ", "));
    out += fmt::format("  {}{}: {} ({})\n", seen[i].field, whose, seen[i].value, seen[i].source);
  }
  return out;
}

std::string collectives_text(const EngineColumn& c) {
  if (c.collectives.empty()) return "none";
  // A group named once after the run of collectives over it.
  std::string out;
  for (size_t i = 0; i < c.collectives.size(); ++i) {
    const StepCollective& s = c.collectives[i];
    out += (out.empty() ? "" : "; ") + s.name;
    if (i + 1 == c.collectives.size() || c.collectives[i + 1].group != s.group) out += " (" + s.group + ")";
  }
  return out;
}

}  // namespace

Status drop_engine_setting(Deployment& deployment, std::string_view name) {
  std::vector<std::string> names;
  for (const EngineSetting& s : kEngineSettings) {
    if (name == s.name) {
      s.drop(deployment.config);
      return Status::ok();
    }
    names.push_back(s.name);
  }
  const std::string guess = did_you_mean(name, names);
  return invalid_argument(fmt::format("'{}' is not a setting some engine lacks; those are {}{}", excerpt(name),
                                      fmt::join(names, ", "), guess.empty() ? "" : "; " + guess));
}

std::vector<EngineColumn> compare_engines(const Deployment& deployment, std::span<const EngineChoice> engines) {
  std::vector<EngineColumn> out;
  for (const EngineChoice& e : engines) out.push_back(column_of(deployment, e));
  return out;
}

std::vector<EngineColumn> compare_engines(const Deployment& deployment, std::span<const EngineId> engines) {
  std::vector<EngineChoice> choices;
  for (EngineId id : engines) choices.push_back({id, ""});
  return compare_engines(deployment, choices);
}

std::string format_engine_comparison(std::span<const EngineColumn> columns) {
  std::vector<std::string> labels = {"placement",        "TP split",          "cpu_offload",
                                     "node-local group", "HBM per GPU",       "host tables per node",
                                     "copies per node",  "collectives/step",  "bytes/token/step",
                                     "KV cache left",    "tightest limit",    "scale bytes 0/255",
                                     "warnings",         "verdict",           "host layouts",
                                     "not counted",      "step time p50"};
  std::vector<std::vector<std::string>> cells;
  for (const EngineColumn& c : columns) {
    std::vector<std::string> v;
    if (!c.status.is_ok()) {
      v.assign(labels.size(), "-");
      v[11] = c.scale_bytes;
      v[13] = "refused: " + std::string(c.status.message());
      v[14] = c.host_layouts.empty() ? "-" : c.host_layouts;
      cells.push_back(std::move(v));
      continue;
    }
    const std::string without = fmt::format("{}", fmt::join(c.planned_without, ", "));
    // How the figures below were planned where the engine refused the deployment as written.
    const std::string instead = c.planned_with.empty() ? "without " + without : "with " + c.planned_with;
    // The refusal's own words go below the table, full width (format_comparison_refusals).
    v.push_back(c.refusal.empty() ? c.placement
                                  : fmt::format("{}, {} (as asked: refused, below)", c.placement, instead));
    v.push_back(c.tp_split);
    v.push_back(c.cpu_offload ? "on" : "off");
    v.push_back(c.node_local_group_min == c.node_local_group_max
                    ? std::to_string(c.node_local_group_min)
                    : fmt::format("{}-{}", c.node_local_group_min, c.node_local_group_max));
    v.push_back(format_gib(c.hbm_bytes_per_gpu_max));
    v.push_back(format_gib(c.host_table_bytes_per_node_max));
    v.push_back(std::to_string(c.table_copies_per_node_max));
    v.push_back(collectives_text(c));
    v.push_back(format_size_short(c.collective_bytes_per_token));
    v.push_back(format_signed_gib(c.kv_cache_left_bytes_min));
    v.push_back(c.tightest_limit.empty() ? "none" : c.tightest_limit);
    v.push_back(c.scale_bytes);
    std::string w;
    for (const std::string& k : c.warnings) w += (w.empty() ? "" : ", ") + k;
    v.push_back(w.empty() ? "none" : w);
    const std::string verdict = c.fits.is_ok() ? "fits" : "cannot run: " + std::string(c.fits.message());
    v.push_back(c.refusal.empty() ? verdict
                                  : fmt::format("{}; {}: {}", c.planned_with.empty() ? "refused as asked" : "its default refused",
                                                instead, verdict));
    v.push_back(c.host_layouts.empty() ? "-" : c.host_layouts);
    std::string nc;
    for (const std::string& n : c.not_counted) nc += (nc.empty() ? "" : "; ") + n.substr(0, n.find(" ("));
    v.push_back(nc.empty() ? "none" : nc);
    v.push_back(fmt::format("{:.1f} us at {} tokens/rank", c.step_time_us_p50, c.step_tokens));
    cells.push_back(std::move(v));
  }
  // One row per fact, a column per engine, aligned; long cells wrap inside their column.
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"engine"});
  for (const EngineColumn& c : columns) rows.back().push_back(c.label.empty() ? engine_name(c.engine) : c.label);
  for (size_t row = 0; row < labels.size(); ++row) {
    rows.push_back({labels[row]});
    for (const std::vector<std::string>& col : cells) rows.back().push_back(col[row]);
  }
  std::string out = format_text_table(rows, kComparisonCellWidth);
  out += "(bytes/token/step: what one token adds to the step's collectives over every table, ids as int64 and "
         "rows as bf16; HBM and KV per GPU at the busiest GPU; see `plan --engine NAME` for one engine's reasons)\n";
  out += format_comparison_refusals(columns);
  out += format_comparison_defaults(columns);
  return out;
}

Json engine_comparison_json(std::span<const EngineColumn> columns) {
  Json engines = Json::array();
  for (const EngineColumn& c : columns) {
    Json j;
    j["engine"] = c.label.empty() ? std::string(engine_name(c.engine)) : c.label;
    j["scale_bytes"] = c.scale_bytes;
    j["host_layouts"] = c.host_layouts;
    j["not_counted"] = c.not_counted;
    if (!c.status.is_ok()) {
      j["error"] = error_json_or_null(c.status);
      engines.push_back(std::move(j));
      continue;
    }
    j["error"] = nullptr;
    j["placement"] = c.placement;
    j["tp_split"] = c.tp_split;
    j["cpu_offload"] = c.cpu_offload;
    j["node_local_group_min"] = c.node_local_group_min;
    j["node_local_group_max"] = c.node_local_group_max;
    j["hbm_bytes_per_gpu_max"] = c.hbm_bytes_per_gpu_max;
    j["host_table_bytes_per_node_max"] = c.host_table_bytes_per_node_max;
    j["table_copies_per_node_max"] = c.table_copies_per_node_max;
    Json steps = Json::array();
    for (const StepCollective& s : c.collectives)
      steps.push_back({{"name", s.name}, {"group", s.group}, {"bytes_per_token", s.bytes_per_token}});
    j["collectives_per_step"] = std::move(steps);
    j["collective_bytes_per_token"] = c.collective_bytes_per_token;
    j["kv_cache_left_bytes_min"] = c.kv_cache_left_bytes_min;
    j["warnings"] = c.warnings;
    j["fits"] = error_json_or_null(c.fits);
    j["step_time_us_p50"] = c.step_time_us_p50;
    j["step_tokens_per_rank"] = c.step_tokens;
    j["step_calibration"] = c.step_calibration;
    j["refusal"] = c.refusal.empty() ? Json(nullptr) : Json(c.refusal);
    j["tightest_limit"] = c.tightest_limit.empty() ? Json(nullptr) : Json(c.tightest_limit);
    j["planned_without"] = c.planned_without;
    j["planned_with"] = c.planned_with.empty() ? Json(nullptr) : Json(c.planned_with);
    Json defaults = Json::array();
    for (const DefaultUsed& u : c.defaults_used)
      defaults.push_back({{"field", u.field}, {"value", u.value}, {"source", u.source}});
    j["defaults_used"] = std::move(defaults);
    engines.push_back(std::move(j));
  }
  Json doc = json_document("plan");
  doc["engines"] = std::move(engines);
  doc["warnings"] = Json::array();  // each engine's are in its column
  doc["error"] = nullptr;
  return doc;
}

}  // namespace engram
