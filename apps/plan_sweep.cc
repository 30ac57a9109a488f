#include "apps/plan_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>

#include "apps/flag_numbers.h"
#include "apps/plan_sweep_svg.h"
#include "core/base/file_replace.h"
#include "core/base/json_output.h"
#include "core/base/text_excerpt.h"
#include "core/base/units.h"
#include "core/engines/engine_profile.h"
#include "core/plan/memory_fit.h"
#include "core/plan/placement_config.h"
#include "core/plan/step_time_plan.h"

namespace engram::app {
namespace {

// The config that asks the plan for `placement`, cpu_offload as written
// (the engine's default does not turn it back on).
EngramConfig config_for(Placement placement, const EngramConfig& base) {
  EngramConfig config = config_asking_for(placement, base);
  config.cpu_offload_given = true;
  return config;
}

struct SweepRow {
  int tp = 1, dp = 1;
  uint64_t shm_bytes = 0;
  std::string asked;       // a placement name, or "plan"
  std::string builds;      // what the plan gave (names, comma separated)
  bool engine_default = false;  // what the engine builds here by its defaults
  std::string verdict;     // "fits", "refused: ...", "cannot run: ..."
  int64_t kv_left_bytes = 0;
  uint64_t host_bytes_per_node = 0;
  std::vector<double> step_us;  // per token count; empty where not planned
};

std::string placements_of(const PlanResult& plan) {
  std::string out;
  for (const PlacementGroupSummary& g : plan.groups)
    if (out.find(placement_name(g.placement)) == std::string::npos)
      out += (out.empty() ? "" : ",") + std::string(placement_name(g.placement));
  return out;
}

}  // namespace

Result<SweepSpec> parse_sweep(const std::vector<std::string>& words, const Deployment& base) {
  SweepSpec s;
  s.tp = {base.layout.tp};
  s.dp = {base.layout.dp};
  s.tokens = {base.config.tokens_per_rank_max};
  for (const std::string& word : words) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos)
      return invalid_argument(fmt::format("--sweep: '{}' is not KEY=VALUES; write e.g. tp=1,2,4,8 dp=1,2 tokens=1,1024 "
                                          "shm=64GiB,1TiB placement=all",
                                          excerpt(word)));
    const std::string key = word.substr(0, eq), values = word.substr(eq + 1);
    if (key == "tp") {
      ENGRAM_ASSIGN_OR_RETURN(s.tp, whole_number_list_flag<int>("--sweep tp", values, 1, kMaxRanks));
    } else if (key == "dp") {
      ENGRAM_ASSIGN_OR_RETURN(s.dp, whole_number_list_flag<int>("--sweep dp", values, 1, kMaxRanks));
    } else if (key == "tokens") {
      ENGRAM_ASSIGN_OR_RETURN(s.tokens, whole_number_list_flag<int>("--sweep tokens", values, 1, kMaxTokensPerRank));
    } else if (key == "shm") {
      size_t at = 0;
      while (at <= values.size()) {
        const size_t comma = std::min(values.find(',', at), values.size());
        ENGRAM_ASSIGN_OR_RETURN(const uint64_t bytes, parse_bytes(values.substr(at, comma - at), "--sweep shm"));
        s.shm_bytes.push_back(bytes);
        at = comma + 1;
      }
    } else if (key == "placement") {
      size_t at = 0;
      while (at <= values.size()) {
        const size_t comma = std::min(values.find(',', at), values.size());
        const std::string name = values.substr(at, comma - at);
        at = comma + 1;
        if (name == "plan") continue;
        if (name == "all") {
          for (const PlacementOps& ops : placement_registry()) s.placements.push_back(ops.id);
          continue;
        }
        ENGRAM_ASSIGN_OR_RETURN(const Placement p, parse_placement(name));
        s.placements.push_back(p);
      }
    } else {
      return invalid_argument(
          fmt::format("--sweep: '{}' is not a sweep key; write tp, dp, tokens, shm or placement", excerpt(key)));
    }
  }
  return s;
}

namespace {

// The frontier plot's points: each row at the first token count.
std::vector<SweepPoint> sweep_points(const std::vector<SweepRow>& rows) {
  std::vector<SweepPoint> points;
  for (const SweepRow& r : rows) {
    SweepPoint p;
    p.label = fmt::format("tp{} dp{} /dev/shm {} asked {}", r.tp, r.dp, format_gib(r.shm_bytes), r.asked);
    p.placement = r.builds;
    p.engine_default = r.engine_default;
    p.fits = r.verdict == "fits";
    p.refused = r.step_us.empty() || r.verdict.rfind("refused", 0) == 0;
    p.reason = excerpt(r.verdict, 90);
    p.step_us = r.step_us.empty() ? 0 : r.step_us.front();
    p.kv_left_gib = static_cast<double>(r.kv_left_bytes) / static_cast<double>(1ull << 30);
    p.host_gib_per_node = static_cast<double>(r.host_bytes_per_node) / static_cast<double>(1ull << 30);
    points.push_back(std::move(p));
  }
  return points;
}

}  // namespace

int run_sweep(const Deployment& base, const SweepSpec& spec, bool json, const std::string& svg_path) {
  const auto start = std::chrono::steady_clock::now();
  const StepConstants constants = step_constants_for(base.hosts.empty() ? "H200" : base.hosts.front().gpu_model);
  std::vector<uint64_t> shms = spec.shm_bytes;
  if (shms.empty()) shms.push_back(base.hosts.empty() ? 0 : base.hosts.front().tmpfs_bytes_total);
  std::vector<SweepRow> rows;
  int planned = 0;
  for (int tp : spec.tp)
    for (int dp : spec.dp)
      for (uint64_t shm : shms) {
        Deployment d = base;
        d.layout.tp = tp;
        d.layout.dp = dp;
        d.rank_hosts.clear();
        const int world = d.layout.world_size() + d.layout.extra_ranks;
        const int hosts = std::max<int>(1, static_cast<int>(d.hosts.size()));
        for (HostSpec& h : d.hosts) {
          h.gpu_count = (world + hosts - 1) / hosts;
          if (!spec.shm_bytes.empty()) {
            h.tmpfs_bytes_total = shm;
            h.shm_mounted = shm > 0;
          }
        }
        // What the engine builds by its defaults, then each asked placement.
        std::string engine_builds;
        std::vector<std::optional<Placement>> asks = {std::nullopt};
        for (Placement p : spec.placements) asks.push_back(p);
        for (const std::optional<Placement>& ask : asks) {
          Deployment one = d;
          if (ask) one.config = config_for(*ask, d.config);
          SweepRow row;
          row.tp = tp;
          row.dp = dp;
          row.shm_bytes = shm;
          row.asked = ask ? placement_name(*ask) : "plan";
          WarningSink sink;
          Result<FitCheckedPlan> checked = plan_with_memory_fit(one, sink);
          ++planned;
          if (!checked.is_ok()) {
            row.verdict = "refused: " + checked.status().message();
          } else {
            const PlanResult& plan = checked->plan;
            row.builds = placements_of(plan);
            if (!ask) engine_builds = row.builds;
            if (ask && row.builds != placement_name(*ask))
              row.verdict = fmt::format("refused: the plan gives {} here", row.builds);
            else
              row.verdict = checked->fits.is_ok() ? "fits" : "cannot run: " + checked->fits.message();
            row.kv_left_bytes = std::numeric_limits<int64_t>::max();
            for (const HostMemory& h : plan.hosts) {
              row.kv_left_bytes = std::min(row.kv_left_bytes, h.kv_cache_left_bytes_min);
              row.host_bytes_per_node = std::max(row.host_bytes_per_node, h.host_table_bytes);
            }
            if (plan.hosts.empty()) row.kv_left_bytes = 0;
            for (int t : spec.tokens) row.step_us.push_back(plan_step_time_us_max(plan, constants, t));
          }
          row.engine_default = !row.builds.empty() && row.builds == engine_builds;
          if (ask || spec.placements.empty()) rows.push_back(std::move(row));
        }
      }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!svg_path.empty()) {
    const std::string title = fmt::format("{} deployments as {} plans them", planned, engine_name(base.engine.profile));
    const Status wrote = write_output_file(svg_path, render_sweep_svg(sweep_points(rows), title, spec.tokens.front()),
                                           "the sweep's SVG plot");
    if (!wrote.is_ok()) {
      std::cerr << "engramlab: " << wrote.to_string() << "\n";
      return 2;
    }
  }
  if (json) {
    Json doc = json_document("plan");
    doc["calibration"] = constants.calibration;
    doc["tokens_per_rank"] = spec.tokens;
    Json list = Json::array();
    for (const SweepRow& r : rows) {
      Json j{{"tp", r.tp}, {"dp", r.dp}, {"shm_bytes", r.shm_bytes}, {"asked", r.asked}, {"builds", r.builds},
             {"engine_default", r.engine_default}, {"verdict", r.verdict}, {"kv_cache_left_bytes", r.kv_left_bytes},
             {"host_table_bytes_per_node", r.host_bytes_per_node}, {"step_time_us_p50", r.step_us}};
      list.push_back(std::move(j));
    }
    doc["sweep"] = std::move(list);
    doc["deployments_planned"] = planned;
    doc["seconds"] = seconds;
    doc["warnings"] = Json::array();
    doc["error"] = nullptr;
    std::cout << dump_json(doc) << "\n";
    return 0;
  }
  std::string out = fmt::format("sweep (as {} plans it; step time: the slowest rank's p50 per layer, calibration: {}):\n",
                                engine_name(base.engine.profile), constants.calibration);
  std::string head = fmt::format("{:>4} {:>4} {:>10} {:<20} {:<22} {:>10} {:>10}", "tp", "dp", "/dev/shm", "asked",
                                 "builds (* engine's own)", "KV left", "host/node");
  for (int t : spec.tokens) head += fmt::format(" {:>11}", fmt::format("us@{}", t));
  out += head + "  verdict\n";
  for (const SweepRow& r : rows) {
    std::string line = fmt::format("{:>4} {:>4} {:>10} {:<20} {:<22} {:>10} {:>10}", r.tp, r.dp, format_gib(r.shm_bytes),
                                   r.asked, (r.engine_default ? "*" : " ") + r.builds,
                                   r.builds.empty() ? "-" : format_signed_gib(r.kv_left_bytes),
                                   r.builds.empty() ? "-" : format_gib(r.host_bytes_per_node));
    for (size_t i = 0; i < spec.tokens.size(); ++i)
      line += i < r.step_us.size() ? fmt::format(" {:>11.1f}", r.step_us[i]) : fmt::format(" {:>11}", "-");
    out += line + "  " + r.verdict + "\n";
  }
  out += fmt::format("planned {} deployments in {:.2f} s\n", planned, seconds);
  if (!svg_path.empty()) out += fmt::format("plot: {}\n", svg_path);
  std::cout << out;
  return 0;
}

}  // namespace engram::app
