// `engramlab bench`: the device lookup timed through the runtime on real
// processes, one per GPU, run by every process of a job:
//
//   engramlab launch -n 2 -- engramlab bench --csv bench.csv
//
// Each rank times every placement the plan gives here on the same ids
// (operator_checks/bench_rank.h); rank 0 also times the kernels straight on its own
// GPU (the one-process reference, operator_checks/lookup_bench.h), then prints
// the table, the ratios and the targets, and writes the SVG plot and the CSV
// (operator_checks/bench_table.h). Exit codes: 0 measured (targets are reported, not
// enforced); 1 the run failed (no GPU, a CUDA or NCCL error, a lookup that
// disagreed with the CPU reference); 2 bad flags or no launcher environment.
//
// With --file deployment.yaml the file gives the model, layout and config
// (each rank times the placement `plan` of the file gives, started with the
// file's config), each rank compares its host with the file's entry before
// anything is built and the placement and handle type the runtime chose
// with the plan after (apps/deployment_bridge.h): a difference is exit 1.
#include <climits>
#include <cstdint>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "apps/deployment_bridge.h"
#include "apps/flag_numbers.h"
#include "apps/launched_rank.h"
#include "backends/ipc/launch_env.h"
#include "core/base/file_replace.h"
#include "core/base/json_output.h"
#include "core/base/text_excerpt.h"
#include "core/base/units.h"
#include "core/plan/planned_rank.h"
#include "operator_checks/latency_svg.h"
#include "operator_checks/bench_rank.h"
#include "operator_checks/bench_table.h"
#include "backends/ranks/rank_device.h"

#ifdef ENGRAM_HAVE_CUDA_BACKEND
#include "operator_checks/lookup_bench.h"
#endif

namespace engram::app {

// The command is the front of these checks (operator_checks/).
using namespace engram::operator_checks;
namespace {

// --reference-gib's default: the one-process reference reads a table of the
// timed table's rows and heads.
constexpr std::string_view kReferenceOfTable = "table";

struct BenchFlags {
  LaunchedRankFlags rank{"1", "0"};
  std::string placements = "all";
  std::string tokens = "1,16,64,256,1024,8192";
  std::string replays_text = "200";
  std::string id_draws_text = "8";
  std::string warmup_text = "20";
  std::string samples_text = "64";
  std::string table_text = "0";
  std::string seed_text = "1";
  std::string reference_gib_text = "table";
  std::string svg = "bench_latency.svg";
  std::string csv;
  bool variants = false;
  std::string reference_order = "both";
  bool json = false;
  BridgeFlags bridge;  // apps/deployment_bridge.h
};

// Exit 2 for bad input, 1 for a failed run; under --json the error is a
// document on stdout as well as a line on stderr.
int fail(const BenchFlags& f, const std::string& who, const Status& status, int exit_code) {
  fmt::print(stderr, "engramlab bench: {}{}\n", who, status.to_string());
  if (f.json) std::fputs((dump_json(error_document("bench", status)) + "\n").c_str(), stdout);
  return exit_code;
}

Result<std::vector<Placement>> parse_placements(const std::string& text) {
  std::vector<Placement> out;
  if (text == "all") return out;  // empty: every placement
  std::vector<std::string> names;
  for (const PlacementOps& ops : placement_registry()) names.push_back(ops.name);
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    const std::string name = text.substr(from, comma - from);
    bool known = false;
    for (const PlacementOps& ops : placement_registry()) {
      if (name != ops.name) continue;
      known = true;
      if (std::find(out.begin(), out.end(), ops.id) == out.end()) out.push_back(ops.id);
    }
    if (!known)
      return invalid_argument(fmt::format("--placements: '{}' is not a placement; write all, or some of {} "
                                          "separated by commas",
                                          excerpt(name), fmt::join(names, ", ")));
    from = comma + 1;
  }
  return out;
}

// The flags that need no launcher, read before anything starts.
Result<operator_checks::BenchOptions> options_from(const BenchFlags& f) {
  operator_checks::BenchOptions o;
  ENGRAM_ASSIGN_OR_RETURN(o.token_counts, whole_number_list_flag<int>("--tokens", f.tokens, 1, kMaxTokensPerRank));
  ENGRAM_ASSIGN_OR_RETURN(o.timed_replays, whole_number_flag<int>("--replays", f.replays_text, 1, 1'000'000));
  ENGRAM_ASSIGN_OR_RETURN(o.id_draws, whole_number_flag<int>("--id-draws", f.id_draws_text, 1, 1'000'000));
  ENGRAM_ASSIGN_OR_RETURN(o.warmup_replays, whole_number_flag<int>("--warmup", f.warmup_text, 0, 1'000'000));
  ENGRAM_ASSIGN_OR_RETURN(o.sampled_slots, whole_number_flag<int>("--samples", f.samples_text, 0, 1 << 20));
  ENGRAM_ASSIGN_OR_RETURN(o.table_index, whole_number_flag<int>("--table", f.table_text, 0, 1 << 20));
  ENGRAM_ASSIGN_OR_RETURN(o.ids_seed, whole_number_flag<uint64_t>("--seed", f.seed_text, 0, UINT64_MAX));
  ENGRAM_ASSIGN_OR_RETURN(o.placements, parse_placements(f.placements));
  if (f.reference_gib_text != kReferenceOfTable)
    ENGRAM_RETURN_IF_ERROR(whole_number_flag<int>("--reference-gib", f.reference_gib_text, 0, 1 << 20).status());
  using Order = operator_checks::BenchOptions::ReferenceOrder;
  if (f.reference_order == "first") o.reference_order = Order::kFirst;
  else if (f.reference_order == "last") o.reference_order = Order::kLast;
  else if (f.reference_order == "both") o.reference_order = Order::kBoth;
  else
    return invalid_argument(fmt::format("--reference-order: '{}' is not an order; write first, last or both",
                                        excerpt(f.reference_order)));
  return o;
}

#ifdef ENGRAM_HAVE_CUDA_BACKEND
// Rank 0's one-process kernels on its own GPU; the NVLink copy reads the
// next GPU this process sees.
// `reference_gib` 0: a table of the timed table's rows (like with like, the
// default); more: that many GiB of V4.1 rows, a table unlike the runtime's.
OneProcessReference cuda_reference(const BenchFlags& f, const ipc::LaunchEnv& env, int reference_gib, int replays,
                                   int warmup) {
  return [&f, local_rank = env.local_rank, reference_gib, replays, warmup](
             const std::vector<int>& token_counts, const TableSpec& table,
             const operator_checks::BenchIdDraws& ids) -> Result<OneProcessFigures> {
    operator_checks::LookupBenchOptions o;
    if (reference_gib == 0 && (table.row_format != RowFormat::kFp8E4M3Ue8m0 || table.dim != o.dim))
      return failed_precondition(fmt::format(
          "the one-process kernels read V4.1 rows (FP8 E4M3, dim {}), and the timed table's rows are {} dim {}: no "
          "like-for-like reference; time a V4.1 model (e.g. --model deepseek-v4.1-flash-layer1 on one GPU), or give "
          "--reference-gib N for N GiB of V4.1 rows (its ratios then compare unlike tables)",
          o.dim, table.row_format == RowFormat::kBf16 ? "bf16" : "FP8", table.dim));
    o.gpu = local_rank;
    const int visible = ranks::visible_gpus().count;
    o.peer_gpu = visible >= 2 ? (local_rank + 1) % visible : -1;
    o.table_bytes = reference_gib == 0 ? table.table_bytes() : static_cast<uint64_t>(reference_gib) * kGiB;
    o.tokens_per_rank.assign(token_counts.begin(), token_counts.end());
    o.heads = table.head_count();
    o.replays = replays;
    o.warmup_replays = warmup;
    o.id_draws = ids.draws;
    o.ids = [&ids](int64_t tokens, int draw) { return ids.ids(static_cast<int>(tokens), draw); };
    o.sweep_variants = f.variants;
    ENGRAM_ASSIGN_OR_RETURN(operator_checks::LookupBenchReport r, operator_checks::run_lookup_bench(o, [](std::string_view line) {
                              fmt::print(stderr, "{}\n", line);
                              std::fflush(stderr);
                            }));
    OneProcessFigures out;
    out.device_name = r.device_name;
    out.table_rows = r.table_rows;
    out.row_bytes = r.row_bytes;
    out.notes = r.notes;
    out.notes.push_back(fmt::format("the method's fixed cost, p50: the two events alone {:.1f} us, one empty-kernel "
                                    "graph {:.1f} us", r.events_only.p50_us, r.empty_kernel_graph.p50_us));
    for (const operator_checks::LookupBenchPoint& p : r.points) {
      OneProcessPoint q;
      q.tokens = static_cast<int>(p.tokens_per_rank);
      q.ids_fingerprint = p.ids_fingerprint;
      q.peer_kernel = p.peer;
      q.plain_kernel = p.plain;
      q.nccl_path_ran = p.collective_ran;
      q.nccl_path = p.collective;
      q.nvlink_copy_ran = p.peer_copy_ran;
      q.nvlink_copy = p.peer_copy;
      out.points.push_back(q);
      if (!p.variants.empty()) {
        std::string line = fmt::format("peer kernel variants at {} tokens, p50 us:", p.tokens_per_rank);
        for (const operator_checks::VariantTiming& v : p.variants) line += fmt::format(" {} {:.2f};", v.name, v.latency.p50_us);
        out.notes.push_back(line);
      }
    }
    return out;
  };
}
#endif

Json bench_json(const BenchReport& r, const BenchFlags& f, const Json& file_check) {
  Json j = json_document("bench");
  j["world_size"] = r.world_size;
  j["tp"] = r.layout.tp;
  j["dp"] = r.layout.dp;
  j["table_model"] = r.table_model;
  j["layer_id"] = r.layer_id;
  j["table_rows"] = r.table_rows;
  j["row_bytes"] = r.row_bytes;
  j["tokens_per_rank"] = r.token_counts;
  j["id_draws"] = r.id_draws;
  j["placements"] = Json::array();
  for (const BenchPlacementRow& row : r.placements) {
    Json p = Json::object();
    p["placement"] = placement_name(row.placement);
    p["asked_with"] = row.asked_with;
    p["ran"] = row.ran;
    p["not_run_reason"] = row.ran ? Json(nullptr) : Json(row.not_run_reason);
    p["latency_us_p50"] = Json::array();
    p["latency_us_p50_slowest_rank"] = Json::array();
    for (const BenchCell& c : row.cells) {
      p["latency_us_p50"].push_back(c.ran ? Json(c.latency.p50_us) : Json(nullptr));
      p["latency_us_p50_slowest_rank"].push_back(c.ran ? Json(c.latency_us_p50_slowest_rank) : Json(nullptr));
    }
    j["placements"].push_back(std::move(p));
  }
  j["svg"] = f.svg;
  j["csv"] = f.csv.empty() ? Json(nullptr) : Json(f.csv);
  j["notes"] = r.notes;
  j["file_check"] = file_check;
  j["warnings"] = Json::array();
  j["error"] = nullptr;
  return j;
}

// The flags a deployment file gives instead (--file).
constexpr FlagTheFileGives kBenchGivenByTheFile[] = {
    {"--model", "model"},           {"--tp", "layout.tp"},
    {"--dp", "layout.dp"},          {"--shard-group", "config.shard_group"}, {"--placement", "config.placement"},
    {"--placements", "config: the placement plan gives"}, {"--ranks-per-gpu", "hosts[].ranks_per_gpu"},
    {"--engine", "engine.name"},
};

// The bridge of one rank: the file, its plan and this host against it.
struct BenchBridge {
  DeploymentBridge bridge;
  PlanResult plan;
  FileCheck check;
};

// Reads --file (nullopt without it) and sets the options from it; exit code
// 2 (bad input) or 1 (the plan of the file refuses it) beside the error.
Result<std::optional<BenchBridge>> bridge_from(const BenchFlags& f, const CLI::App& cmd, const ipc::LaunchEnv& env,
                                               operator_checks::BenchOptions& options, int& exit_code) {
  exit_code = 2;
  ENGRAM_ASSIGN_OR_RETURN(std::optional<DeploymentBridge> bridge, load_bridge(f.bridge));
  if (!bridge) return std::optional<BenchBridge>();
  ENGRAM_RETURN_IF_ERROR(refuse_flags_beside_file(cmd, kBenchGivenByTheFile));
  ENGRAM_ASSIGN_OR_RETURN(options.runtime, runtime_options_from_file(*bridge, f.rank, env));
  auto plan = plan_of_file(*bridge);
  if (!plan.is_ok() && plan.status().code() != ErrorCode::kInvalidArgument) exit_code = 1;
  if (!plan.is_ok()) return plan.status();
  options.placements = planned_placements(*plan);
  options.config_as_given = true;
  ENGRAM_ASSIGN_OR_RETURN(ObserveOptions observe, launched_rank_observe_options(env));
  FileCheck check = check_against_file(*bridge, env.rank, env.world_size, true, observe_this_host(observe));
  print_file_check(stderr, fmt::format("rank {}: ", env.rank), *bridge, check);
  return std::optional<BenchBridge>(BenchBridge{std::move(bridge).value(), std::move(plan).value(), std::move(check)});
}

// The placement the plan of the file gives this rank, as the bench ran it.
std::vector<std::string> bench_choice_differences(const BenchBridge& b, const BenchReport& report, int rank) {
  const PlannedRank planned = planned_rank(b.plan, rank);
  for (const BenchPlacementRow& row : report.placements) {
    if (row.placement != planned.placement) continue;
    if (row.ran)
      return runtime_choice_differences(b.plan, b.bridge.file.source, rank, row.placement, row.handle_type, "");
    return {fmt::format("rank {}: placement: the plan of {} gives {} ({}), the runtime did not run it: {}", rank,
                        b.bridge.file.source, placement_name(planned.placement), planned.reason, row.not_run_reason)};
  }
  return {};
}

int run_bench(const BenchFlags& f, const CLI::App& cmd) {
  auto options = options_from(f);
  if (!options.is_ok()) return fail(f, "", options.status(), 2);
  auto env = ipc::read_launch_env(ipc::process_env());
  if (!env.is_ok()) {
    return fail(f, "",
                Status(env.status().code(),
                       env.status().message() + "; run it under a launcher, one process per GPU, e.g. `engramlab "
                                                "launch -n 2 -- engramlab bench`"),
                2);
  }
  auto runtime = runtime_options_from(f.rank, *env);
  if (!runtime.is_ok()) return fail(f, "", runtime.status(), 2);
  options->runtime = std::move(runtime).value();
  auto ranks_per_gpu = ranks_per_gpu_from(f.rank);
  if (!ranks_per_gpu.is_ok()) return fail(f, "", ranks_per_gpu.status(), 2);
  int bridge_exit_code = 0;
  auto bridge = bridge_from(f, cmd, *env, *options, bridge_exit_code);
  if (!bridge.is_ok()) return fail(f, "", bridge.status(), bridge_exit_code);
  if (*bridge) ranks_per_gpu = ranks_per_gpu_from_file((*bridge)->bridge, (*bridge)->check);
  if (Status checked = operator_checks::check_bench_options(*options, env->rank); !checked.is_ok()) return fail(f, "", checked, 2);
  // Rank 0 writes the plot and the CSV: their paths are refused before the
  // bench runs (write_output_file checks them again when it writes).
  for (const auto& [path, what] : {std::pair{f.svg, "the SVG plot"}, {f.csv, "the CSV"}})
    if (env->rank == 0 && !path.empty())
      if (Status usable = check_output_path(path, what); !usable.is_ok()) return fail(f, "", usable, 2);
#ifdef ENGRAM_HAVE_CUDA_BACKEND
  const bool reference_of_table = f.reference_gib_text == kReferenceOfTable;
  const int reference_gib =
      reference_of_table ? 0 : whole_number_flag<int>("--reference-gib", f.reference_gib_text, 0, 1 << 20).value();
  if (reference_of_table || reference_gib > 0)
    options->reference = cuda_reference(f, *env, reference_gib, options->timed_replays, options->warmup_replays);
#endif

  WarningSink sink;
  operator_checks::BenchReport report;
  const Status status = run_launched_rank(*env, ranks_per_gpu.value(), sink, [&](RankBackend& backend) {
    if (*bridge)
      ENGRAM_RETURN_IF_ERROR(agree_on_file_check(*backend.world, (*bridge)->check, (*bridge)->bridge.file.source));
    return operator_checks::run_bench_rank(backend, *options, sink, report);
  });
  for (const Warning& w : sink.warnings()) fmt::print(stderr, "rank {}: warning: {}\n", env->rank, w.text);
  if (!status.is_ok()) return fail(f, fmt::format("rank {}: FAILED: ", env->rank), status, 1);
  std::vector<std::string> choice_differences;
  if (*bridge) choice_differences = bench_choice_differences(**bridge, report, env->rank);
  for (const std::string& line : choice_differences)
    fmt::print(stderr, "rank {}: differs from {}: {}\n", env->rank, (*bridge)->bridge.file.source, line);
  if (!choice_differences.empty()) {
    return fail(f, fmt::format("rank {}: FAILED: ", env->rank),
                failed_precondition(fmt::format("the runtime's choice differs from the plan of {}",
                                                (*bridge)->bridge.file.source)),
                1);
  }
  if (env->rank != 0) {
    fmt::print("rank {}: bench done (rank 0 prints the table)\n", env->rank);
    return 0;
  }
  // Under --json the table goes to stderr and stdout holds the document alone.
  std::fputs(operator_checks::format_bench_table(report).c_str(), f.json ? stderr : stdout);
  auto svg = render_log_log_svg(operator_checks::bench_plot(report));
  Status wrote = svg.is_ok() ? write_output_file(f.svg, *svg, "the SVG plot") : svg.status();
  if (!wrote.is_ok()) return fail(f, "rank 0: ", wrote, 1);
  fmt::print(f.json ? stderr : stdout, "\nplot: {}\n", f.svg);
  if (!f.csv.empty()) {
    Status csv = write_output_file(f.csv, operator_checks::format_bench_csv(report), "the CSV");
    if (!csv.is_ok()) return fail(f, "rank 0: ", csv, 1);
    fmt::print(f.json ? stderr : stdout, "csv: {}\n", f.csv);
  }
  const Json file_check =
      *bridge ? file_check_json(&(*bridge)->bridge, &(*bridge)->check, choice_differences) : Json(nullptr);
  if (f.json) std::fputs((dump_json(bench_json(report, f, file_check)) + "\n").c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

CommandRegistration bench_registration("55-bench", [](CLI::App& app, int& exit_code) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "One rank of the lookup bench, under a launcher (engramlab launch -n N, torchrun, srun; one process "
               "per GPU): every placement's device lookup timed through the runtime on the same ids, beside the "
               "one-process kernels and the same run's copy ceilings; table, SVG plot, CSV");
  add_launched_rank_flags(*cmd, f->rank);
  cmd->add_option("--placements", f->placements,
                  "all (default), or a comma list of placements to ask the plan for")->capture_default_str();
  cmd->add_option("--tokens", f->tokens, "tokens per rank to time, comma-separated")->capture_default_str();
  cmd->add_option("--replays", f->replays_text, "timed graph replays per size")->capture_default_str();
  cmd->add_option("--id-draws", f->id_draws_text,
                  "draws of ids each size's replays spread over (the runtime's and the one-process kernels' alike)")
      ->capture_default_str();
  cmd->add_option("--warmup", f->warmup_text, "untimed replays first (before each draw of ids)")->capture_default_str();
  cmd->add_option("--samples", f->samples_text, "slots per size checked against the CPU reference")->capture_default_str();
  cmd->add_option("--table", f->table_text, "index of the table timed (every table is built)")->capture_default_str();
  cmd->add_option("--seed", f->seed_text, "seed of the row ids")->capture_default_str();
  cmd->add_option("--reference-gib", f->reference_gib_text,
                  "rank 0's one-process reference table: 'table' (the timed table's rows and heads: like with "
                  "like), or GiB of V4.1 rows (0: no reference)")->capture_default_str();
  cmd->add_option("--svg", f->svg, "where to write the latency plot")->capture_default_str();
  cmd->add_option("--csv", f->csv, "where to write the numbers as CSV (none when empty)");
  cmd->add_flag("--json", f->json, "print a machine-readable JSON document (the table goes to stderr)");
  add_bridge_flags(*cmd, f->bridge, "the model, layout and config the ranks run (the plan's placement is timed)");
  // Hidden: for tuning the peer kernel, not for users.
  cmd->add_flag("--variants", f->variants, "also time every compiled peer kernel variant")->group("");
  cmd->add_option("--reference-order", f->reference_order,
                  "time the one-process reference before the placements (first), after them (last), or both, the ratios "
                  "then over the mean of the two")
      ->capture_default_str();
  cmd->callback([f, cmd, &exit_code] { exit_code = run_bench(*f, *cmd); });
});

}  // namespace
}  // namespace engram::app
