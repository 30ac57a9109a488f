// Calibrating the step model (core/placements/step_cost.h) from measured
// lookups: a calibration file is what `engramlab bench --csv` writes (one
// row per series and token count, with the GPU model, ranks, group, table
// bytes and heads of the run), or a file of the same columns transcribed
// from docs/ (docs/calibration_1xh200.csv). The fit moves the model's
// "fitted" constants to the least squared log error over the file's points
// and reports each point's predicted / measured ratio.
//
// Series a calibration reads: the placements' names (the runtime's lookup),
// one_process_peer_kernel / one_process_plain_kernel (a gather over the
// shards: device_peer's step), one_process_nccl_path (the collective path
// with its memset: device_collective's step plus the memset node),
// probe_host_kernel (a host read by the kernel alone, never staged) and
// probe_host_stager (the CPU stager at every size). ceiling_* rows are
// skipped (copies, not lookups).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/placements/step_cost.h"

namespace engram {

struct CalibrationPoint {
  int line = 0;          // 1-based line in the file
  std::string series;
  int tokens = 0;
  double p50_us = 0;
  std::string gpu_model;
  int ranks = 1;
  int group_size = 1;
  uint64_t table_bytes = 0;
  int heads = 24;
  int stager_threads = 0;        // 0: the runtime's default
  double direct_fraction = -1;   // < 0: the runtime's default
  double cpu_gather_gbps = 0;    // the machine's CPU gather ceiling at stager_threads (0: the model's)
  int host_cores = 0;            // 0: the model's
  std::string note;
};

struct CalibrationFile {
  std::string path;
  std::string gpu_model;
  std::vector<CalibrationPoint> points;  // lookups only (ceilings skipped)
};

// invalid_argument "PATH:LINE: field FIELD: ..." for a missing column, a
// field that is not a number, a negative or absurd figure, mixed GPU models,
// an unknown series, a series without a 1-token row or a row of 1024 tokens or more.
Result<CalibrationFile> parse_calibration(std::string_view text, std::string_view path);
Result<CalibrationFile> load_calibration(const std::string& path);
// invalid_argument naming the file, the first point's line and gpu_model
// where the file's GPU model is not `gpu_model`.
Status check_calibration_gpu(const CalibrationFile& file, const std::string& gpu_model);

// The model's p50 for one point under `constants`.
double predict_point(const CalibrationPoint& point, const StepConstants& constants);

struct PointFit {
  CalibrationPoint point;
  double predicted_us = 0;
  double ratio = 0;  // predicted / measured
};
struct CalibrationFit {
  StepConstants constants;
  std::vector<PointFit> points;
  std::vector<std::string> not_fitted;  // fitted constants no point moves (kept at their defaults)
  double rms_log_error = 0;
};
CalibrationFit fit_calibration(const CalibrationFile& file, const StepConstants& start);
// The predictions of `constants` for every point (no fit).
std::vector<PointFit> judge_calibration(const CalibrationFile& file, const StepConstants& constants);

// The bound a point's prediction is held to (issue 49's acceptance): within
// 1.25x of the measured p50 for device placements and the device reference
// kernels, 1.5x for host placements and probes.
double calibration_bound(const CalibrationPoint& point);
// Every point judged against `constants` (no fit): a line per point with its
// ratio and bound, and the count outside; `misses` gets that count.
std::string format_calibration_check(const std::vector<PointFit>& points, const StepConstants& constants, int& misses);

// The fitted constants and the fit's error per series and size, for people.
std::string format_calibration_fit(const CalibrationFit& fit);

}  // namespace engram
