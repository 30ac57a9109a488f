#include "core/plan/step_calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "core/base/text_excerpt.h"
#include "core/base/yaml_fields.h"
#include "core/model/gpu_models.h"
#include "core/placements/placement.h"

namespace engram {
namespace {

// A CSV line's fields; a quoted field may hold commas and doubled quotes.
std::vector<std::string> split_csv(std::string_view line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        out.back() += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      out.emplace_back();
    } else {
      out.back() += ch;
    }
  }
  return out;
}

Status field_error(std::string_view path, int line, std::string_view field, std::string_view what) {
  return invalid_argument(fmt::format("{}:{}: field {}: {}", path, line, field, what));
}

// A number in [min, max]; "absurd" beyond.
Result<double> number_at(std::string_view path, int line, std::string_view field, const std::string& text, double min,
                         double max, std::string_view range_text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
    return field_error(path, line, field, fmt::format("'{}' is not a number", excerpt(text)));
  if (v < min || v > max)
    return field_error(path, line, field,
                       fmt::format("{} is {}; {}", text, v < 0 ? "negative" : "out of range", range_text));
  return v;
}

enum class SeriesKind { kPeer, kCollective, kNcclPath, kHostKernel, kHostStager, kPlacement, kCeiling };

Result<SeriesKind> series_kind(std::string_view series) {
  if (series.starts_with("ceiling_")) return SeriesKind::kCeiling;
  if (series.starts_with("one_process_peer_kernel") || series.starts_with("one_process_plain_kernel"))
    return SeriesKind::kPeer;
  if (series.starts_with("one_process_nccl_path")) return SeriesKind::kNcclPath;
  if (series == "probe_host_kernel") return SeriesKind::kHostKernel;
  if (series == "probe_host_stager") return SeriesKind::kHostStager;
  if (parse_placement(series).is_ok()) return SeriesKind::kPlacement;
  return invalid_argument("unknown series");
}

constexpr const char* kRequired[] = {"series", "tokens_per_rank", "latency_us_p50", "gpu_model",
                                     "ranks",  "group_size",      "table_bytes",    "heads"};

}  // namespace

Result<CalibrationFile> parse_calibration(std::string_view text, std::string_view path) {
  CalibrationFile file;
  file.path = std::string(path);
  std::map<std::string, size_t> column;
  int line_no = 0;
  size_t start = 0;
  std::map<std::string, std::set<int>> sizes_of;
  std::map<std::string, int> first_line_of;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::vector<std::string> cells = split_csv(line);
    if (column.empty()) {
      for (size_t i = 0; i < cells.size(); ++i) column[cells[i]] = i;
      for (const char* need : kRequired)
        if (!column.contains(need))
          return field_error(path, line_no, need,
                             "missing from the header; a calibration file is what `engramlab bench --csv` writes "
                             "(series, tokens_per_rank, latency_us_p50, gpu_model, ranks, group_size, table_bytes, "
                             "heads, ...)");
      continue;
    }
    auto cell = [&](const char* name) -> std::string {
      const auto it = column.find(name);
      return it == column.end() || it->second >= cells.size() ? std::string() : cells[it->second];
    };
    CalibrationPoint p;
    p.line = line_no;
    p.series = cell("series");
    auto kind = series_kind(p.series);
    if (!kind.is_ok())
      return field_error(path, line_no, "series",
                         fmt::format("'{}' is not a series a calibration reads (a placement, one_process_*, "
                                     "probe_host_kernel, probe_host_stager, ceiling_*)",
                                     excerpt(p.series)));
    if (kind.value() == SeriesKind::kCeiling) continue;
    if (cell("latency_us_p50").empty() && cell("note").starts_with("not run")) continue;  // bench: not run here
    ENGRAM_ASSIGN_OR_RETURN(const double tokens, number_at(path, line_no, "tokens_per_rank", cell("tokens_per_rank"), 1,
                                                           1 << 20, "write 1 to 1,048,576 tokens per rank"));
    p.tokens = static_cast<int>(tokens);
    // A replayed graph takes microseconds; a minute per lookup is no lookup.
    ENGRAM_ASSIGN_OR_RETURN(p.p50_us, number_at(path, line_no, "latency_us_p50", cell("latency_us_p50"), 0.5, 6e7,
                                                "a lookup's median is from 0.5 us to 60 s"));
    p.gpu_model = cell("gpu_model");
    if (p.gpu_model.empty()) return field_error(path, line_no, "gpu_model", "empty; write the GPU model (H200, ...)");
    if (file.gpu_model.empty()) file.gpu_model = p.gpu_model;
    if (!same_gpu_model_name(p.gpu_model, file.gpu_model))
      return field_error(path, line_no, "gpu_model",
                         fmt::format("'{}' differs from the file's first row ('{}'); one file calibrates one GPU model",
                                     excerpt(p.gpu_model), file.gpu_model));
    ENGRAM_ASSIGN_OR_RETURN(const double ranks, number_at(path, line_no, "ranks", cell("ranks"), 1, 65536, "1 or more"));
    ENGRAM_ASSIGN_OR_RETURN(const double group,
                            number_at(path, line_no, "group_size", cell("group_size"), 1, ranks, "1 to ranks"));
    ENGRAM_ASSIGN_OR_RETURN(const double table,
                            number_at(path, line_no, "table_bytes", cell("table_bytes"), 1, 1e18, "1 B to 1 EB"));
    ENGRAM_ASSIGN_OR_RETURN(const double heads, number_at(path, line_no, "heads", cell("heads"), 1, 4096, "1 to 4096"));
    p.ranks = static_cast<int>(ranks);
    p.group_size = static_cast<int>(group);
    p.table_bytes = static_cast<uint64_t>(table);
    p.heads = static_cast<int>(heads);
    if (!cell("stager_threads").empty()) {
      ENGRAM_ASSIGN_OR_RETURN(const double t, number_at(path, line_no, "stager_threads", cell("stager_threads"), 1, 1024,
                                                        "1 to 1024 threads"));
      p.stager_threads = static_cast<int>(t);
    }
    if (!cell("stager_direct_fraction").empty()) {
      ENGRAM_ASSIGN_OR_RETURN(p.direct_fraction, number_at(path, line_no, "stager_direct_fraction",
                                                           cell("stager_direct_fraction"), 0, 1, "0 to 1"));
    }
    if (!cell("cpu_gather_gbps").empty()) {
      ENGRAM_ASSIGN_OR_RETURN(p.cpu_gather_gbps, number_at(path, line_no, "cpu_gather_gbps", cell("cpu_gather_gbps"),
                                                           0.01, 10000, "0.01 to 10,000 GB/s"));
    }
    if (!cell("host_cores").empty()) {
      ENGRAM_ASSIGN_OR_RETURN(const double cores,
                              number_at(path, line_no, "host_cores", cell("host_cores"), 1, 4096, "1 to 4096"));
      p.host_cores = static_cast<int>(cores);
    }
    p.note = cell("note");
    const std::string key = fmt::format("{} (ranks {}, group {})", p.series, p.ranks, p.group_size);
    sizes_of[key].insert(p.tokens);
    if (!first_line_of.contains(key)) first_line_of[key] = line_no;
    file.points.push_back(std::move(p));
  }
  if (column.empty()) return field_error(path, std::max(line_no, 1), "series", "no header line; the file is empty");
  if (file.points.empty())
    return field_error(path, line_no, "series", "no lookup rows; the fit needs measured lookups");
  // The fixed cost shows at 1 token, the rates from 1024 tokens up.
  for (const auto& [key, sizes] : sizes_of) {
    const char* missing = !sizes.contains(1) ? "1-token row" : *sizes.rbegin() < 1024 ? "row of 1024 tokens or more" : nullptr;
    if (missing != nullptr)
      return field_error(path, first_line_of[key], "tokens_per_rank",
                         fmt::format("series {} has no {}; the fit needs both ends of every series (bench --tokens "
                                     "1,64,1024,8192)",
                                     key, missing));
  }
  return file;
}

Result<CalibrationFile> load_calibration(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(const std::string text, read_text_file(path, "--calibration"));
  return parse_calibration(text, path);
}

Status check_calibration_gpu(const CalibrationFile& file, const std::string& gpu_model) {
  if (same_gpu_model_name(file.gpu_model, gpu_model)) return Status::ok();
  return field_error(file.path, file.points.front().line, "gpu_model",
                     fmt::format("the file calibrates {}, the deployment's GPUs are {}; give a bench run of {}",
                                 file.gpu_model, gpu_model, gpu_model));
}

double predict_point(const CalibrationPoint& p, const StepConstants& constants) {
  StepConstants c = constants;
  StepCostInput in;
  in.tokens = p.tokens;
  in.tokens_slot = p.tokens;
  in.heads = p.heads;
  in.table_bytes = p.table_bytes;
  in.group_size = p.group_size;
  in.group_link = LinkKind::kNvlink;
  if (p.stager_threads > 0) in.stager_threads = p.stager_threads;
  if (p.direct_fraction >= 0) in.stager_direct_fraction = p.direct_fraction;
  if (p.host_cores > 0) c.host_cores = p.host_cores;
  // The machine's CPU gather ceiling at these threads, where measured.
  if (p.cpu_gather_gbps > 0) c.cpu_gather_gbps_per_thread = p.cpu_gather_gbps / in.stager_threads;
  const SeriesKind kind = series_kind(p.series).value();
  Placement placement = Placement::kDevicePeer;
  switch (kind) {
    case SeriesKind::kPeer: placement = Placement::kDevicePeer; break;
    case SeriesKind::kCollective:
    case SeriesKind::kNcclPath: placement = Placement::kDeviceCollective; break;
    case SeriesKind::kHostKernel:
      placement = Placement::kHostShared;
      in.staged_rows_min = int64_t{1} << 62;
      break;
    case SeriesKind::kHostStager:
      placement = Placement::kHostShared;
      in.staged_rows_min = 0;
      break;
    case SeriesKind::kPlacement: placement = parse_placement(p.series).value(); break;
    case SeriesKind::kCeiling: return 0;
  }
  double us = placement_ops(placement).step_time(in, c).total_us;
  // The reference collective keeps a memset of its [group x tokens] buffer
  // (docs/perf_notes.md lines 411-419: the runtime ran it too until the
  // owned-rows gather wrote the zeros itself).
  if (kind == SeriesKind::kNcclPath)
    us += c.node_us + static_cast<double>(p.group_size) * p.tokens * p.heads * 512 / (c.hbm_copy_gbps * 1e3);
  return us;
}

std::vector<PointFit> judge_calibration(const CalibrationFile& file, const StepConstants& constants) {
  std::vector<PointFit> out;
  for (const CalibrationPoint& p : file.points) {
    const double predicted = predict_point(p, constants);
    out.push_back({p, predicted, predicted / p.p50_us});
  }
  return out;
}

namespace {
double loss_of(const CalibrationFile& file, const StepConstants& c) {
  double sum = 0;
  for (const CalibrationPoint& p : file.points) {
    const double e = std::log(predict_point(p, c) / p.p50_us);
    sum += e * e;
  }
  return sum;
}
}  // namespace

CalibrationFit fit_calibration(const CalibrationFile& file, const StepConstants& start) {
  CalibrationFit fit;
  StepConstants best = start;
  double best_loss = loss_of(file, best);
  std::vector<const StepConstantField*> moving;
  for (const StepConstantField& f : step_constant_fields()) {
    if (!f.fitted) continue;
    // A constant no point depends on stays where it was.
    StepConstants probe = best;
    probe.*f.member = std::max(probe.*f.member, 1e-3) * 1.5;
    if (std::fabs(loss_of(file, probe) - best_loss) < 1e-12) {
      fit.not_fitted.push_back(f.name);
      continue;
    }
    moving.push_back(&f);
  }
  // Coordinate descent in log space: each constant multiplied by shrinking
  // factors while the squared log error falls.
  for (int sweep = 0; sweep < 60; ++sweep) {
    bool moved = false;
    for (const StepConstantField* f : moving) {
      for (double step : {1.3, 1.1, 1.03, 1.01, 1.003}) {
        for (double factor : {step, 1 / step}) {
          StepConstants trial = best;
          trial.*(f->member) = std::max(trial.*(f->member), 1e-3) * factor;
          const double l = loss_of(file, trial);
          if (l < best_loss - 1e-12) {
            best = trial;
            best_loss = l;
            moved = true;
          }
        }
      }
    }
    if (!moved) break;
  }
  best.calibration = "fitted on " + file.path;
  fit.constants = best;
  fit.points = judge_calibration(file, best);
  fit.rms_log_error = std::sqrt(best_loss / static_cast<double>(file.points.size()));
  return fit;
}

double calibration_bound(const CalibrationPoint& point) {
  const SeriesKind kind = series_kind(point.series).value();
  const bool device = kind == SeriesKind::kPeer || kind == SeriesKind::kCollective || kind == SeriesKind::kNcclPath ||
                      (kind == SeriesKind::kPlacement && is_device_placement(parse_placement(point.series).value()));
  return device ? 1.25 : 1.5;
}

std::string format_calibration_check(const std::vector<PointFit>& points, const StepConstants& constants, int& misses) {
  misses = 0;
  std::string out = fmt::format("calibration check: {} ({}) against {} measured points\n", constants.calibration,
                                constants.gpu_model, points.size());
  out += fmt::format("  {:<34} {:>7} {:>11} {:>11} {:>7} {:>6}  line\n", "series (ranks, group)", "tokens",
                     "measured us", "model us", "ratio", "bound");
  for (const PointFit& p : points) {
    const double bound = calibration_bound(p.point);
    const bool within = std::max(p.ratio, 1 / p.ratio) <= bound;
    misses += within ? 0 : 1;
    out += fmt::format("  {:<34} {:>7} {:>11.1f} {:>11.1f} {:>7.2f} {:>6.2f}  {}{}\n",
                       fmt::format("{} ({}, {})", p.point.series, p.point.ranks, p.point.group_size), p.point.tokens,
                       p.point.p50_us, p.predicted_us, p.ratio, bound, p.point.line, within ? "" : "  OUTSIDE");
  }
  out += fmt::format("{} of {} points outside their bound\n", misses, points.size());
  return out;
}

std::string format_calibration_fit(const CalibrationFit& fit) {
  std::string out = fmt::format("calibration: {} ({})\n", fit.constants.calibration, fit.constants.gpu_model);
  out += "constants:\n";
  for (const StepConstantField& f : step_constant_fields())
    out += fmt::format("  {:<28} {:>10.4g} {:<6} {}{}\n", f.name, fit.constants.*f.member, f.unit,
                       f.fitted ? "" : "(fact) ",
                       std::find(fit.not_fitted.begin(), fit.not_fitted.end(), f.name) != fit.not_fitted.end()
                           ? "not fitted: no point depends on it"
                           : f.source);
  out += "fit error per series and size (predicted / measured p50):\n";
  out += fmt::format("  {:<34} {:>7} {:>11} {:>11} {:>7}  line\n", "series (ranks, group)", "tokens", "measured us",
                     "model us", "ratio");
  for (const PointFit& p : fit.points)
    out += fmt::format("  {:<34} {:>7} {:>11.1f} {:>11.1f} {:>7.2f}  {}\n",
                       fmt::format("{} ({}, {})", p.point.series, p.point.ranks, p.point.group_size), p.point.tokens,
                       p.point.p50_us, p.predicted_us, p.ratio, p.point.line);
  out += fmt::format("rms log error {:.3f} over {} points\n", fit.rms_log_error, fit.points.size());
  return out;
}

}  // namespace engram
