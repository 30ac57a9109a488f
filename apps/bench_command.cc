// `engramlab bench`: the device lookup's speed on every GPU of this machine
// (DESIGN.md section 8): the collective path (NCCL) against the peer path
// (gather straight from the owning VMM shards) against the copy floor, one
// lookup per replayed CUDA graph. Prints a table, checks the targets,
// writes a log-log SVG plot and optionally a CSV.
// Exit codes: 0 measured (targets are reported, not enforced); 1 the run
// failed (no GPU, no P2P, a CUDA or NCCL error, a lookup that disagreed);
// 2 bad flags, or CUDA support not built in.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "apps/flag_numbers.h"
#include "core/base/json_output.h"
#include "core/report/latency_svg.h"
#include "core/base/units.h"

#ifdef ENGRAM_HAVE_CUDA_BACKEND
#include "backends/cuda/lookup_bench.h"
#endif

namespace engram::app {
namespace {

struct BenchFlags {
  double shard_gib = 8.0;
  std::string tokens = "1,16,64,256,1024,8192";
  std::string replays_text = "200";
  std::string warmup_text = "20";
  std::string svg = "bench_latency.svg";
  std::string csv;
  bool cold_l2 = false;
  std::string seed_text = "2024";
  std::string gpus_text = "0";
  bool variants = false;
  bool json = false;
  // Read from the texts above by read_numbers().
  int replays = 0, warmup = 0, gpus = 0;
  uint64_t seed = 0;
};

// The whole-number flags, as every command reads them.
Status read_numbers(BenchFlags& f) {
  ENGRAM_ASSIGN_OR_RETURN(f.replays, whole_number_flag<int>("--replays", f.replays_text, 1, 1'000'000));
  ENGRAM_ASSIGN_OR_RETURN(f.warmup, whole_number_flag<int>("--warmup", f.warmup_text, 0, 1'000'000));
  ENGRAM_ASSIGN_OR_RETURN(f.seed, whole_number_flag<uint64_t>("--seed", f.seed_text, 0, UINT64_MAX));
  ENGRAM_ASSIGN_OR_RETURN(f.gpus, whole_number_flag<int>("--gpus", f.gpus_text, 0, 1024));
  return Status::ok();
}

[[maybe_unused]] Result<std::vector<int64_t>> parse_tokens(const std::string& text) {
  return whole_number_list_flag<int64_t>("--tokens", text, 1, 1 << 20);
}

[[maybe_unused]] Status write_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return failed_precondition(fmt::format("cannot write the {} to '{}'", what, path));
  return Status::ok();
}

// Exit 2 for bad input (and a build without CUDA), 1 for a failed run; under
// --json the error is a document on stdout as well as a line on stderr.
int fail(const BenchFlags& f, const Status& status, int exit_code = 0) {
  fmt::print(stderr, "engramlab bench: {}\n", status.to_string());
  if (f.json) std::fputs((dump_json(error_document("bench", status)) + "\n").c_str(), stdout);
  if (exit_code != 0) return exit_code;
  return status.code() == ErrorCode::kInvalidArgument ? 2 : 1;
}

#ifdef ENGRAM_HAVE_CUDA_BACKEND
Json percentiles_json(const LatencyPercentiles& l) { return {{"p10", l.p10_us}, {"p50", l.p50_us}, {"p90", l.p90_us}}; }

Json bench_json(const BenchFlags& f, const cuda::LookupBenchReport& r) {
  Json j = json_document("bench");
  j["gpus"] = r.gpus;
  j["device_name"] = r.device_name;
  j["table_rows"] = r.table_rows;
  j["row_bytes"] = r.row_bytes;
  j["shard_bytes"] = r.shard_bytes;
  j["replays"] = f.replays;
  j["warmup_replays"] = f.warmup;
  j["cold_l2"] = f.cold_l2;
  j["points"] = Json::array();
  for (const auto& p : r.points) {
    Json point = Json::object();
    point["tokens_per_rank"] = p.tokens_per_rank;
    point["collective_us"] = p.collective_ran ? percentiles_json(p.collective) : Json(nullptr);
    point["collective_as_graph"] = p.collective_ran ? Json(p.collective_as_graph) : Json(nullptr);
    point["peer_us"] = percentiles_json(p.peer);
    point["plain_us"] = p.plain_ran ? percentiles_json(p.plain) : Json(nullptr);
    point["local_copy_us"] = percentiles_json(p.local_copy);
    point["peer_copy_us"] = percentiles_json(p.peer_copy);
    point["copy_floor_us"] = p.floor_us;
    point["read_bytes"] = p.read_bytes;
    point["write_bytes"] = p.write_bytes;
    point["remote_fraction"] = p.remote_fraction;
    point["local_fraction"] = p.local_fraction;
    point["peer_variant"] = p.peer_variant;
    point["slots_checked_against_cpu"] = p.slots_checked_against_cpu;
    j["points"].push_back(std::move(point));
  }
  j["notes"] = r.notes;
  j["svg"] = f.svg;
  j["csv"] = f.csv.empty() ? Json(nullptr) : Json(f.csv);
  j["warnings"] = Json::array();
  j["error"] = nullptr;
  return j;
}
#endif

#ifdef ENGRAM_HAVE_CUDA_BACKEND
int run_bench(const BenchFlags& f) {
  // Under --json the table goes to stderr and stdout holds the document alone.
  FILE* out = f.json ? stderr : stdout;
  auto tokens = parse_tokens(f.tokens);
  if (!tokens.is_ok()) return fail(f, tokens.status());
  if (!(f.shard_gib > 0) || f.replays < 1 || f.warmup < 0 || f.gpus < 0) {
    return fail(f, invalid_argument(fmt::format("--shard-gib {} must be > 0, --replays {} >= 1, --warmup {} >= 0, "
                                                "--gpus {} >= 0", f.shard_gib, f.replays, f.warmup, f.gpus)));
  }
  cuda::LookupBenchOptions options;
  options.shard_bytes = static_cast<uint64_t>(f.shard_gib * static_cast<double>(kGiB));
  options.tokens_per_rank = *tokens;
  options.replays = f.replays;
  options.warmup_replays = f.warmup;
  options.cold_l2 = f.cold_l2;
  options.seed = f.seed;
  options.gpus = f.gpus;
  options.sweep_variants = f.variants;
  auto result = cuda::run_lookup_bench(options, [](std::string_view line) {
    fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
  });
  if (!result.is_ok()) return fail(f, result.status());
  const cuda::LookupBenchReport& r = *result;

  fmt::print(out, "engramlab bench: {} x {}, DP = {}, one table of {} rows x {} B ({} per GPU), {} heads per token\n",
             r.gpus, r.device_name, r.gpus, r.table_rows, r.row_bytes, format_gib(r.shard_bytes), options.heads);
  fmt::print(out, "one lookup per captured CUDA graph, launched on every GPU together, timed on GPU 0: {} replays after {} "
             "warm-up, L2 {}\n\n", f.replays, f.warmup, f.cold_l2 ? "scrubbed before each replay" : "warm (same ids)");
  fmt::print(out, "| tokens | collective us | peer us | speedup | copy-floor us | peer/floor |\n");
  fmt::print(out, "| ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const auto& p : r.points) {
    const std::string collective = p.collective_ran ? fmt::format("{:.1f}", p.collective.p50_us) : "n/a";
    const std::string speedup = p.collective_ran ? fmt::format("{:.1f}x", p.collective.p50_us / p.peer.p50_us) : "n/a";
    fmt::print(out, "| {} | {} | {:.1f} | {} | {:.1f} | {:.2f} |\n", p.tokens_per_rank, collective, p.peer.p50_us, speedup,
               p.floor_us, p.peer.p50_us / p.floor_us);
  }
  fmt::print(out, "\nmedians above; p10 / p50 / p90 and the copies behind the floor:\n");
  fmt::print(out, "| tokens | collective us | peer us | plain kernel us | local copy us | peer copy us | remote / local / DEAD "
             "slots |\n");
  fmt::print(out, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  auto three = [](const LatencyPercentiles& l) { return fmt::format("{:.1f} / {:.1f} / {:.1f}", l.p10_us, l.p50_us, l.p90_us); };
  for (const auto& p : r.points) {
    fmt::print(out, "| {} | {}{} | {} | {} | {} | {} | {:.3f} / {:.3f} / {:.3f} |\n", p.tokens_per_rank,
               p.collective_ran ? three(p.collective) : "n/a",
               p.collective_ran && !p.collective_as_graph ? " (eager)" : "", three(p.peer),
               p.plain_ran ? three(p.plain) : "n/a",
               three(p.local_copy),
               three(p.peer_copy), p.remote_fraction, p.local_fraction, std::max(0.0, 1.0 - p.remote_fraction - p.local_fraction));
  }
  fmt::print(out, "\ncopy floor: R = tokens x heads x {} B read, W = tokens x heads x {} B written; the copies stream R "
             "(from this GPU's shard, or the next GPU's over NVLink) and write W;\n"
             "  floor = max(remote_fraction x peer_copy_us, (local_fraction x R + W) / (R + W) x local_copy_us)\n"
             "  i.e. the remote rows at the peer copy's NVLink rate and, concurrently, the local rows and all writes "
             "at the local copy's HBM rate.\n",
             r.row_bytes, options.dim * 2);
  for (const auto& p : r.points) {
    fmt::print(out, "checked: {} tokens: peer == collective bitwise on GPU 0{}; {} sampled slots equal the CPU rule\n",
               p.tokens_per_rank, p.collective_ran ? "" : " (collective not run)", p.slots_checked_against_cpu);
  }
  for (const auto& note : r.notes) fmt::print(out, "note: {}\n", note);

  fmt::print(out, "plain kernel: a warp per row, shard table by value, raw bytes widened, no dequantisation (the "
             "reference the targets name), "
             "over the same ids and shards.\n");
  fmt::print(out, "\nfixed cost of the method (timed like the lookups), p10 / p50 / p90 us: the two events alone {}; empty "
             "graph {}; one empty-kernel node {}\n", three(r.events_only),
             r.empty_graph_ran ? three(r.empty_graph) : "n/a", three(r.empty_kernel_graph));
  fmt::print(out, "peer kernel variant per size:");
  for (const auto& p : r.points) fmt::print(out, " {}: {};", p.tokens_per_rank, p.peer_variant);
  fmt::print(out, "\n");
  if (f.variants && !r.points.empty() && !r.points.front().variants.empty()) {
    fmt::print(out, "\nvariant sweep (p50 us, each output == gather_peer bitwise; * best per size):\n| variant |");
    for (const auto& p : r.points) fmt::print(out, " {} |", p.tokens_per_rank);
    fmt::print(out, "\n| --- |");
    for (size_t i = 0; i < r.points.size(); ++i) fmt::print(out, " ---: |");
    fmt::print(out, "\n");
    std::vector<size_t> best(r.points.size(), 0);
    for (size_t i = 0; i < r.points.size(); ++i) {
      for (size_t v = 0; v < r.points[i].variants.size(); ++v) {
        if (r.points[i].variants[v].latency.p50_us < r.points[i].variants[best[i]].latency.p50_us) best[i] = v;
      }
    }
    for (size_t v = 0; v < r.points.front().variants.size(); ++v) {
      fmt::print(out, "| {} |", r.points.front().variants[v].name);
      for (size_t i = 0; i < r.points.size(); ++i) {
        fmt::print(out, " {:.2f}{} |", r.points[i].variants[v].latency.p50_us, best[i] == v ? "*" : "");
      }
      fmt::print(out, "\n");
    }
    fmt::print(out, "best per size:");
    for (size_t i = 0; i < r.points.size(); ++i) {
      fmt::print(out, " {}: {} {:.2f} us;", r.points[i].tokens_per_rank, r.points[i].variants[best[i]].name,
                 r.points[i].variants[best[i]].latency.p50_us);
    }
    fmt::print(out, "\n");
  }

  // The acceptance targets, as measured here.
  fmt::print(out, "\ntargets (2 x H200 acceptance):\n");
  bool any_small = false, small_ok = true;
  std::string worst;
  for (const auto& p : r.points) {
    if (p.tokens_per_rank > 1024 || !p.collective_ran) continue;
    any_small = true;
    const double s = p.collective.p50_us / p.peer.p50_us;
    if (s < 5.0) {
      small_ok = false;
      worst += fmt::format(" {} tokens: {:.1f}x;", p.tokens_per_rank, s);
    }
  }
  fmt::print(out, "  peer >= 5x faster than collective, 1..1024 tokens: {}\n",
             !any_small ? "not measured" : small_ok ? "MET" : "NOT MET (" + worst + ")");
  auto at = [&](int64_t t) -> const cuda::LookupBenchPoint* {
    for (const auto& p : r.points) if (p.tokens_per_rank == t) return &p;
    return nullptr;
  };
  if (const auto* p = at(64)) {
    fmt::print(out, "  peer <= 6 us at 64 tokens: {} ({:.1f} us)\n", p->peer.p50_us <= 6.0 ? "MET" : "NOT MET", p->peer.p50_us);
  } else {
    fmt::print(out, "  peer <= 6 us at 64 tokens: not measured\n");
  }
  if (const auto* p = at(8192)) {
    const double ratio = p->peer.p50_us / p->floor_us;
    fmt::print(out, "  peer within 1.15x of the copy floor at 8192 tokens: {} ({:.2f}x)\n", ratio <= 1.15 ? "MET" : "NOT MET",
               ratio);
  } else {
    fmt::print(out, "  peer within 1.15x of the copy floor at 8192 tokens: not measured\n");
  }

  // The same targets for the plain reference kernel, timed in this run: what
  // the method allows on this machine without dequantisation.
  {
    std::string ratios;
    for (const auto& p : r.points) {
      if (p.tokens_per_rank > 1024 || !p.collective_ran || !p.plain_ran) continue;
      ratios += fmt::format(" {}: {:.1f}x;", p.tokens_per_rank, p.collective.p50_us / p.plain.p50_us);
    }
    fmt::print(out, "  for reference, the plain kernel in this run: vs collective{}", ratios.empty() ? " n/a;" : ratios);
    if (const auto* p = at(64); p && p->plain_ran) fmt::print(out, " {:.1f} us at 64 tokens;", p->plain.p50_us);
    if (const auto* p = at(8192); p && p->plain_ran) {
      fmt::print(out, " {:.2f}x the floor at 8192 tokens", p->plain.p50_us / p->floor_us);
    }
    fmt::print(out, "\n");
  }

  LogLogPlot plot;
  plot.title = fmt::format("Engram lookup latency, {} x {}, DP={}", r.gpus, r.device_name, r.gpus);
  plot.x_label = "tokens per rank";
  plot.y_label = "median latency per lookup (us)";
  PlotSeries collective{"collective (NCCL)", "#d62728", false, {}};
  PlotSeries peer{"peer gather", "#1f77b4", false, {}};
  PlotSeries floor{"copy floor", "#555555", true, {}};
  PlotSeries plain{"plain kernel, no dequant (reference)", "#2ca02c", true, {}};
  for (const auto& p : r.points) {
    const double x = static_cast<double>(p.tokens_per_rank);
    if (p.collective_ran) collective.points.emplace_back(x, p.collective.p50_us);
    peer.points.emplace_back(x, p.peer.p50_us);
    if (p.plain_ran) plain.points.emplace_back(x, p.plain.p50_us);
    floor.points.emplace_back(x, p.floor_us);
  }
  if (!collective.points.empty()) plot.series.push_back(collective);
  plot.series.push_back(peer);
  if (!plain.points.empty()) plot.series.push_back(plain);
  plot.series.push_back(floor);
  auto svg = render_log_log_svg(plot);
  Status wrote = svg.is_ok() ? write_file(f.svg, *svg, "SVG plot") : svg.status();
  if (!wrote.is_ok()) return fail(f, wrote);
  fmt::print(out, "\nplot: {}\n", f.svg);
  if (!f.csv.empty()) {
    std::string csv =
        "tokens_per_rank,collective_us_p10,collective_us_p50,collective_us_p90,peer_us_p10,peer_us_p50,peer_us_p90,"
        "local_copy_us_p50,peer_copy_us_p50,copy_floor_us,speedup,peer_over_floor,read_bytes,write_bytes,"
        "remote_fraction,local_fraction,collective_as_graph,plain_us_p50\n";
    for (const auto& p : r.points) {
      csv += fmt::format("{},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.4f},{},{},{:.5f},"
                         "{:.5f},{},{:.3f}\n",
                         p.tokens_per_rank, p.collective.p10_us, p.collective.p50_us, p.collective.p90_us,
                         p.peer.p10_us, p.peer.p50_us, p.peer.p90_us, p.local_copy.p50_us, p.peer_copy.p50_us,
                         p.floor_us, p.collective_ran ? p.collective.p50_us / p.peer.p50_us : 0.0,
                         p.peer.p50_us / p.floor_us, p.read_bytes, p.write_bytes, p.remote_fraction, p.local_fraction,
                         p.collective_as_graph ? 1 : 0, p.plain.p50_us);
    }
    Status csv_written = write_file(f.csv, csv, "CSV");
    if (!csv_written.is_ok()) return fail(f, csv_written);
    fmt::print(out, "csv: {}\n", f.csv);
  }
  if (f.json) std::fputs((dump_json(bench_json(f, r)) + "\n").c_str(), stdout);
  return 0;
}
#else
int run_bench(const BenchFlags& f) {
  return fail(f, failed_precondition("CUDA support was not built into this engramlab (nvcc was not found at build "
                                     "time); build on a machine with the CUDA toolkit to benchmark the device lookup"),
              2);
}
#endif

CommandRegistration reg("55-bench", [](CLI::App& app, int& exit_code) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "Time the device lookup on every GPU here: collective path (NCCL) vs "
                                              "peer path vs the copy floor; table, SVG plot, CSV");
  cmd->add_option("--shard-gib", f->shard_gib, "table shard per GPU, GiB (V4.1 rows of 264 B)")->capture_default_str();
  cmd->add_option("--tokens", f->tokens, "tokens per rank to time, comma-separated")->capture_default_str();
  cmd->add_option("--replays", f->replays_text, "timed graph replays per size")->capture_default_str();
  cmd->add_option("--warmup", f->warmup_text, "untimed replays first")->capture_default_str();
  cmd->add_option("--svg", f->svg, "where to write the latency plot")->capture_default_str();
  cmd->add_option("--csv", f->csv, "where to write the numbers as CSV (none when empty)");
  cmd->add_flag("--cold-l2", f->cold_l2, "read a 4 x L2 buffer on every GPU before each replay (untimed)");
  cmd->add_option("--seed", f->seed_text, "seed of the row ids and the table fill")->capture_default_str();
  cmd->add_option("--gpus", f->gpus_text, "GPUs to use (0: all)")->capture_default_str();
  cmd->add_flag("--json", f->json, "print a machine-readable JSON document (the table goes to stderr)");
  // Hidden: for tuning the peer kernel, not for users.
  cmd->add_flag("--variants", f->variants, "also time every compiled peer kernel variant")->group("");
  cmd->callback([f, &exit_code] {
    Status numbers = read_numbers(*f);
    exit_code = numbers.is_ok() ? run_bench(*f) : fail(*f, numbers);
  });
});

}  // namespace
}  // namespace engram::app
