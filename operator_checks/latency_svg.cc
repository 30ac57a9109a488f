#include "core/base/xml_escape.h"
#include "operator_checks/latency_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace engram {
namespace {

constexpr double kWidth = 760;
constexpr double kHeight = 500;
constexpr double kLeft = 80;     // room for y tick labels
constexpr double kRight = 200;   // room for the legend
constexpr double kTop = 50;
constexpr double kBottom = 60;

// "1", "10", "100", "1e+04": decade labels stay short.
std::string decade_label(int exponent) {
  if (exponent >= 0 && exponent <= 4) return fmt::format("{}", static_cast<long long>(std::llround(std::pow(10.0, exponent))));
  if (exponent < 0 && exponent >= -3) return fmt::format("{}", std::pow(10.0, exponent));
  return fmt::format("1e{}", exponent);
}

struct Axis {
  int lo_decade = 0;
  int hi_decade = 1;
  double to_pixels(double value, double pixel_lo, double pixel_hi) const {
    const double t = (std::log10(value) - lo_decade) / static_cast<double>(hi_decade - lo_decade);
    return pixel_lo + t * (pixel_hi - pixel_lo);
  }
};

Axis axis_for(double lo, double hi) {
  Axis a;
  a.lo_decade = static_cast<int>(std::floor(std::log10(lo)));
  a.hi_decade = static_cast<int>(std::ceil(std::log10(hi)));
  if (a.hi_decade <= a.lo_decade) a.hi_decade = a.lo_decade + 1;
  return a;
}

}  // namespace

Result<std::string> render_log_log_svg(const LogLogPlot& plot) {
  double x_lo = std::numeric_limits<double>::max(), x_hi = 0, y_lo = std::numeric_limits<double>::max(), y_hi = 0;
  size_t points = 0;
  for (const auto& s : plot.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y) || x <= 0 || y <= 0) {
        return invalid_argument(fmt::format("render_log_log_svg: series '{}' has point ({}, {}); a log-log plot needs "
                                            "positive finite coordinates", s.name, x, y));
      }
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
      ++points;
    }
  }
  if (points == 0) return invalid_argument("render_log_log_svg: no points in any series; nothing to plot");
  const Axis xa = axis_for(x_lo, x_hi);
  const Axis ya = axis_for(y_lo, y_hi);
  const double px_lo = kLeft, px_hi = kWidth - kRight;
  const double py_lo = kHeight - kBottom, py_hi = kTop;  // y grows upwards

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"28\" font-size=\"15\" text-anchor=\"middle\">{3}</text>\n",
      kWidth, kHeight, (px_lo + px_hi) / 2, xml_escape(plot.title));
  // Grid: decades solid, 2x and 5x dotted.
  for (int d = xa.lo_decade; d <= xa.hi_decade; ++d) {
    for (int m : {1, 2, 5}) {
      const double v = m * std::pow(10.0, d);
      if (std::log10(v) > xa.hi_decade + 1e-9) break;
      const double x = xa.to_pixels(v, px_lo, px_hi);
      svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ccc\"{3}/>\n", x, py_lo,
                         py_hi, m == 1 ? "" : " stroke-dasharray=\"2,3\"");
      if (m == 1) {
        svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x, py_lo + 18,
                           decade_label(d));
      }
    }
  }
  for (int d = ya.lo_decade; d <= ya.hi_decade; ++d) {
    for (int m : {1, 2, 5}) {
      const double v = m * std::pow(10.0, d);
      if (std::log10(v) > ya.hi_decade + 1e-9) break;
      const double y = ya.to_pixels(v, py_lo, py_hi);
      svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ccc\"{3}/>\n", px_lo, y,
                         px_hi, m == 1 ? "" : " stroke-dasharray=\"2,3\"");
      if (m == 1) {
        svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", px_lo - 8, y + 4,
                           decade_label(d));
      }
    }
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n", px_lo,
                     py_hi, px_hi - px_lo, py_lo - py_hi);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (px_lo + px_hi) / 2,
                     kHeight - 18, xml_escape(plot.x_label));
  svg += fmt::format("<text x=\"20\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {0})\">{1}</text>\n",
                     (py_lo + py_hi) / 2, xml_escape(plot.y_label));

  double legend_y = kTop + 10;
  for (const auto& s : plot.series) {
    const std::string dash = s.dashed ? " stroke-dasharray=\"6,4\"" : "";
    std::string coords;
    for (const auto& [x, y] : s.points) {
      coords += fmt::format("{:.1f},{:.1f} ", xa.to_pixels(x, px_lo, px_hi), ya.to_pixels(y, py_lo, py_hi));
    }
    if (!coords.empty()) coords.pop_back();
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>\n",
                       xml_escape(s.color), dash, coords);
    for (const auto& [x, y] : s.points) {
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", xa.to_pixels(x, px_lo, px_hi),
                         ya.to_pixels(y, py_lo, py_hi), xml_escape(s.color));
    }
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>\n",
                       px_hi + 15, legend_y, px_hi + 45, xml_escape(s.color), dash);
    svg += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", px_hi + 52, legend_y + 4, xml_escape(s.name));
    legend_y += 20;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace engram
