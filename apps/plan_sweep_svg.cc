#include "apps/plan_sweep_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/base/xml_escape.h"

namespace engram::app {
namespace {

constexpr double kWidth = 860, kHeight = 560;
constexpr double kLeft = 80, kRight = 230, kTop = 50, kBottom = 110;
// One colour per placement, in the order met (ten is the registry's size).
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  double at(double v, double pixel_lo, double pixel_hi) const {
    const double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi;
    const double t = ((log ? std::log10(v) : v) - a) / (b - a);
    return pixel_lo + t * (pixel_hi - pixel_lo);
  }
};

std::string tick_text(double v) {
  if (std::fabs(v) >= 100 || v == std::floor(v)) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

}  // namespace

std::string render_sweep_svg(const std::vector<SweepPoint>& points, const std::string& title, int tokens) {
  std::vector<const SweepPoint*> planned;
  std::map<std::string, int> refused_by_reason;
  std::map<std::string, std::string> colour_of;
  double host_max = 0;
  for (const SweepPoint& p : points) {
    if (p.refused || !(p.step_us > 0) || !std::isfinite(p.step_us)) {
      ++refused_by_reason[p.reason.empty() ? "refused" : p.reason];
      continue;
    }
    planned.push_back(&p);
    if (!colour_of.count(p.placement))
      colour_of[p.placement] = kPalette[colour_of.size() % (sizeof kPalette / sizeof kPalette[0])];
    host_max = std::max(host_max, p.host_gib_per_node);
  }
  Scale x{.log = true}, y;
  if (!planned.empty()) {
    x.lo = x.hi = planned.front()->step_us;
    y.lo = y.hi = planned.front()->kv_left_gib;
    for (const SweepPoint* p : planned) {
      x.lo = std::min(x.lo, p->step_us), x.hi = std::max(x.hi, p->step_us);
      y.lo = std::min(y.lo, p->kv_left_gib), y.hi = std::max(y.hi, p->kv_left_gib);
    }
  }
  // Whole decades on x, a margin on y (a single value still gets an axis).
  x.lo = std::pow(10.0, std::floor(std::log10(std::max(x.lo, 1e-3))));
  x.hi = std::pow(10.0, std::ceil(std::log10(std::max(x.hi, x.lo * 10))));
  if (x.hi <= x.lo) x.hi = x.lo * 10;
  const double pad = std::max(1.0, (y.hi - y.lo) * 0.08);
  y.lo = std::min(0.0, y.lo - pad), y.hi += pad;

  const double px_lo = kLeft, px_hi = kWidth - kRight, py_lo = kHeight - kBottom, py_hi = kTop;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"28\" font-size=\"15\" text-anchor=\"middle\">{3}</text>\n",
      kWidth, kHeight, (px_lo + px_hi) / 2, xml_escape(title));
  for (double d = x.lo; d <= x.hi * 1.0001; d *= 10) {
    const double px = x.at(d, px_lo, px_hi);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ccc\"/>\n"
                       "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
                       px, py_lo, py_hi, py_lo + 16, tick_text(d));
  }
  const double y_step = std::pow(10.0, std::floor(std::log10((y.hi - y.lo) / 2)));
  for (double v = std::ceil(y.lo / y_step) * y_step; v <= y.hi; v += y_step) {
    const double py = y.at(v, py_lo, py_hi);
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\"/>\n"
                       "<text x=\"{4}\" y=\"{5:.1f}\" text-anchor=\"end\">{6}</text>\n",
                       px_lo, py, px_hi, std::fabs(v) < y_step / 2 ? "#888" : "#ccc", px_lo - 6, py + 4,
                       tick_text(std::fabs(v) < y_step / 2 ? 0.0 : v));
  }
  svg += fmt::format("<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" fill=\"none\" stroke=\"black\"/>\n",
                     px_lo, py_hi, px_hi - px_lo, py_lo - py_hi);
  svg += fmt::format("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\">step time per layer, slowest rank, at {2} "
                     "tokens a rank (us, log scale)</text>\n",
                     (px_lo + px_hi) / 2, py_lo + 36, tokens);
  svg += fmt::format("<text transform=\"translate(22 {0}) rotate(-90)\" text-anchor=\"middle\">KV cache left on the "
                     "tightest host (GiB)</text>\n",
                     (py_lo + py_hi) / 2);

  // The frontier: fitting points that no other fitting point beats on both.
  std::vector<const SweepPoint*> fitting;
  for (const SweepPoint* p : planned)
    if (p->fits) fitting.push_back(p);
  std::sort(fitting.begin(), fitting.end(), [](const SweepPoint* a, const SweepPoint* b) {
    return a->step_us != b->step_us ? a->step_us < b->step_us : a->kv_left_gib > b->kv_left_gib;
  });
  std::string frontier;
  double best_kv = -1e300;
  for (const SweepPoint* p : fitting) {
    if (p->kv_left_gib <= best_kv) continue;
    best_kv = p->kv_left_gib;
    frontier += fmt::format("{:.1f},{:.1f} ", x.at(p->step_us, px_lo, px_hi), y.at(p->kv_left_gib, py_lo, py_hi));
  }
  if (!frontier.empty())
    svg += "<polyline fill=\"none\" stroke=\"black\" stroke-dasharray=\"5,3\" points=\"" + frontier + "\"/>\n";

  for (const SweepPoint* p : planned) {
    const double r = 3 + (host_max > 0 ? 9 * std::sqrt(p->host_gib_per_node / host_max) : 0);
    const std::string& c = colour_of[p->placement];
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\" fill-opacity=\"0.75\" "
                       "stroke=\"{}\" stroke-width=\"{}\"><title>{}: {}, {:.1f} us, {:.1f} GiB KV left, {:.1f} GiB "
                       "host/node{}</title></circle>\n",
                       x.at(p->step_us, px_lo, px_hi), y.at(p->kv_left_gib, py_lo, py_hi), r,
                       p->fits ? c : std::string("none"), p->engine_default ? std::string("black") : c,
                       p->engine_default ? 2.5 : 1.5, xml_escape(p->label), xml_escape(p->placement), p->step_us,
                       p->kv_left_gib, p->host_gib_per_node, p->fits ? "" : ", cannot run");
  }

  // Legend: placements, then the marks.
  double ly = kTop + 10;
  const double lx = px_hi + 18;
  for (const auto& [name, c] : colour_of) {
    svg += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"6\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n", lx, ly,
                       c, lx + 12, ly + 4, xml_escape(name));
    ly += 20;
  }
  svg += fmt::format("<circle cx=\"{0}\" cy=\"{1}\" r=\"6\" fill=\"#ddd\" stroke=\"black\" stroke-width=\"2.5\"/>"
                     "<text x=\"{2}\" y=\"{3}\">engine's own choice</text>\n",
                     lx, ly + 6, lx + 12, ly + 10);
  svg += fmt::format("<circle cx=\"{0}\" cy=\"{1}\" r=\"6\" fill=\"none\" stroke=\"#555\" stroke-width=\"1.5\"/>"
                     "<text x=\"{2}\" y=\"{3}\">planned, cannot run</text>\n",
                     lx, ly + 26, lx + 12, ly + 30);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\" stroke-dasharray=\"5,3\"/>"
                     "<text x=\"{3}\" y=\"{4}\">frontier</text>\n",
                     lx - 6, ly + 46, lx + 6, lx + 12, ly + 50);
  svg += fmt::format("<text x=\"{}\" y=\"{}\">area: host tables per node</text>\n", lx - 6, ly + 70);

  // What has no point: refused, by reason.
  double ty = py_lo + 62;
  int refused_total = 0;
  for (const auto& [reason, n] : refused_by_reason) refused_total += n;
  svg += fmt::format("<text x=\"{}\" y=\"{}\">{} planned, {} refused{}</text>\n", px_lo, ty, planned.size(),
                     refused_total, refused_total ? ":" : "");
  for (const auto& [reason, n] : refused_by_reason) {
    if (ty > kHeight - 8) break;
    ty += 15;
    svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">{} x {}</text>\n", px_lo + 12, ty, n, xml_escape(reason));
  }
  return svg + "</svg>\n";
}

}  // namespace engram::app
