// A log-log latency plot as a standalone SVG document (no scripts, no
// external fonts): decade grid lines, one polyline with markers per series,
// a legend. Written by `engramlab bench`; any browser shows it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace engram {

struct PlotSeries {
  std::string name;                         // legend text
  std::string color;                        // SVG colour, e.g. "#1f77b4"
  bool dashed = false;
  std::vector<std::pair<double, double>> points;  // (x, y), both > 0
};

struct LogLogPlot {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
};

// kInvalidArgument when there is no point at all, or a coordinate is not a
// positive finite number (a log axis cannot show it), naming the series.
Result<std::string> render_log_log_svg(const LogLogPlot& plot);

}  // namespace engram
