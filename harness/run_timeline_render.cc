// The two drawings of a RunTimeline (harness/run_timeline.h): trace-event
// JSON for Perfetto / chrome://tracing, and a standalone SVG.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "core/base/xml_escape.h"
#include "core/base/file_replace.h"
#include "core/base/json_output.h"
#include "harness/run_timeline.h"

namespace engram::harness {
namespace {

Json slice_args(const RunTimeline& t, const TimelineSlice& s) {
  Json args = {{"simulated_us", s.begin_us}, {"simulated_end_us", s.end_us}};
  if (!s.detail.empty()) args["detail"] = s.detail;
  if (s.model_us) args["model_us"] = *s.model_us;
  if (s.waited_us) args["waited_us"] = *s.waited_us;
  if (s.group >= 0) {
    args["group"] = fmt::format("g{}", s.group);
    if (auto it = t.groups.find(s.group); it != t.groups.end()) args["group_members"] = rank_ranges(it->second);
  }
  return args;
}

// One colour per kind of step, so a lane reads at a glance.
const char* step_colour(const std::string& name) {
  if (name == "import") return "#59a14f";
  if (name == "export") return "#f28e2b";
  if (name == "create") return "#bab0ac";
  if (name == "send" || name == "receive") return "#b07aa1";
  if (name == "shm_create") return "#76b7b2";
  if (name == "stalled" || name == "hung") return "#e15759";
  if (name == "lookup") return "#edc948";
  return "#4e79a7";  // collectives
}

}  // namespace

std::string trace_event_json(const RunTimeline& t) {
  Json events = Json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"ts", 0}, {"pid", 1}, {"tid", 0},
                    {"args", {{"name", t.title}}}});
  for (const RankLane& lane : t.lanes) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"ts", 0}, {"pid", 1}, {"tid", lane.rank},
                      {"args", {{"name", fmt::format("rank {} ({})", lane.rank, lane.host)}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"ts", 0}, {"pid", 1}, {"tid", lane.rank},
                      {"args", {{"sort_index", lane.rank}}}});
    for (const TimelineSlice& s : lane.slices) {
      events.push_back({{"ph", "B"}, {"name", s.name}, {"cat", "step"}, {"ts", s.begin}, {"pid", 1},
                        {"tid", lane.rank}, {"args", slice_args(t, s)}});
      events.push_back({{"ph", "E"}, {"name", s.name}, {"cat", "step"}, {"ts", s.end}, {"pid", 1}, {"tid", lane.rank}});
    }
    for (const TimelineMark& m : lane.marks)
      events.push_back({{"ph", "i"}, {"s", "t"}, {"name", m.name}, {"cat", m.error ? "error" : "fault"}, {"ts", m.at},
                        {"pid", 1}, {"tid", lane.rank}, {"args", {{"simulated_us", m.at_us}, {"detail", m.detail}}}});
  }
  // Trace viewers want each track's events in time order (B before E at one ts).
  std::stable_sort(events.begin(), events.end(), [](const Json& a, const Json& b) {
    if (a["tid"] != b["tid"]) return a["tid"].get<int>() < b["tid"].get<int>();
    return a["ts"].get<uint64_t>() < b["ts"].get<uint64_t>();
  });
  Json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"},
              {"otherData", {{"title", t.title}, {"simulated_end_us", t.end_us},
                             {"time", "ts = simulated microseconds + one per event before it"}}}};
  return doc.dump() + "\n";
}

namespace {

// The SVG's time axis: display ticks to x, with every jump of the simulated
// clock (a stall, a timeout) drawn as a fixed-width break in the axis
// instead of its length, so a 30 s stall does not squash every other event
// into a line.
class TimeAxis {
 public:
  // Ticks closer than this are drawn to scale; a larger step is a break.
  static constexpr uint64_t kBreakAboveTicks = 1000;
  static constexpr double kBreakWidthTicks = 40;

  explicit TimeAxis(const RunTimeline& t) {
    for (const RankLane& lane : t.lanes) {
      for (const TimelineSlice& s : lane.slices) {
        ticks_.push_back(s.begin);
        ticks_.push_back(s.end);
      }
      for (const TimelineMark& m : lane.marks) ticks_.push_back(m.at);
    }
    ticks_.push_back(0);
    ticks_.push_back(t.end);
    std::sort(ticks_.begin(), ticks_.end());
    ticks_.erase(std::unique(ticks_.begin(), ticks_.end()), ticks_.end());
    positions_.push_back(0);
    for (size_t i = 1; i < ticks_.size(); ++i) {
      const uint64_t step = ticks_[i] - ticks_[i - 1];
      if (step > kBreakAboveTicks) {
        breaks_.push_back({positions_.back() + kBreakWidthTicks / 2, ticks_[i - 1], ticks_[i]});
        positions_.push_back(positions_.back() + kBreakWidthTicks);
      } else {
        positions_.push_back(positions_.back() + static_cast<double>(step));
      }
    }
  }
  // Position in compressed ticks, interpolated inside a segment drawn to scale.
  double position(uint64_t tick) const {
    const auto it = std::lower_bound(ticks_.begin(), ticks_.end(), tick);
    if (it == ticks_.end()) return positions_.back();
    const size_t i = static_cast<size_t>(it - ticks_.begin());
    if (*it == tick || i == 0) return positions_[i];
    const double fraction = static_cast<double>(tick - ticks_[i - 1]) / static_cast<double>(ticks_[i] - ticks_[i - 1]);
    return positions_[i - 1] + fraction * (positions_[i] - positions_[i - 1]);
  }
  double span() const { return std::max(positions_.back(), 1.0); }
  struct Break {
    double at;           // compressed position of the break's middle
    uint64_t from_tick;  // the last tick before the clock jumped
    uint64_t to_tick;    // the first after
  };
  const std::vector<Break>& breaks() const { return breaks_; }

 private:
  std::vector<uint64_t> ticks_;
  std::vector<double> positions_;
  std::vector<Break> breaks_;
};

// "0.25 s", "30 s", "12 ms": simulated time for the axis labels.
std::string seconds_text(double us) {
  if (us >= 1e6) return fmt::format("{:.3g} s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:.3g} ms", us / 1e3);
  return fmt::format("{:.3g} us", us);
}

}  // namespace

std::string timeline_svg(const RunTimeline& t) {
  constexpr int kWidth = 1400, kLabel = 190, kTop = 70, kRight = 20;
  const int lane_px = t.lanes.size() > 200 ? 4 : t.lanes.size() > 40 ? 10 : 18;
  // What went wrong, as text under the lanes: each error once, with the ranks it struck.
  std::map<std::string, std::vector<int>> errors;
  std::set<std::string> steps_seen;
  bool any_fault = false;
  for (const RankLane& lane : t.lanes) {
    for (const TimelineSlice& s : lane.slices) steps_seen.insert(s.name);
    for (const TimelineMark& m : lane.marks) {
      if (m.error) errors[m.detail.empty() ? m.name : m.detail].push_back(lane.rank);
      else any_fault = true;
    }
  }
  const int lanes_bottom = kTop + static_cast<int>(t.lanes.size()) * lane_px;
  const int axis_y = lanes_bottom + 14;
  const int height = axis_y + 40 + 16 * static_cast<int>(std::min<size_t>(errors.size(), 20) + (errors.empty() ? 0 : 1));
  const TimeAxis axis(t);
  auto x = [&](uint64_t tick) { return kLabel + (kWidth - kLabel - kRight) * axis.position(tick) / axis.span(); };
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"{}\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n"
      "<text x=\"10\" y=\"38\" font-size=\"11\">ranks down; across: simulated time, each event one tick more; "
      "where the clock jumps (a stall, a timeout) the axis is broken (//) and says by how much; ends at {} "
      "simulated</text>\n",
      kWidth, height, kWidth, height, std::max(lane_px - 2, 6), xml_escape(t.title), seconds_text(static_cast<double>(t.end_us)));
  // Legend: only what happened in this run.
  double lx = 10;
  auto legend = [&](const std::string& name, const std::string& swatch) {
    svg += swatch;
    svg += fmt::format("<text x=\"{:.0f}\" y=\"56\" font-size=\"10\">{}</text>\n", lx + 15, xml_escape(name));
    lx += 15 + 6.5 * static_cast<double>(name.size()) + 14;
  };
  for (const std::string& name : steps_seen)
    legend(name, fmt::format("<rect x=\"{:.0f}\" y=\"47\" width=\"12\" height=\"10\" fill=\"{}\"/>", lx,
                             step_colour(name)));
  if (any_fault)
    legend("fault fired", fmt::format("<path d=\"M{:.0f} 57 l6 -10 l6 10 z\" fill=\"red\"/>", lx));
  if (!errors.empty())
    legend("error", fmt::format("<path d=\"M{0:.0f} 47 l10 10 M{0:.0f} 57 l10 -10\" stroke=\"black\" "
                                "stroke-width=\"2\"/>",
                                lx));
  // The time axis: start, each break with the simulated time it jumps to, the end.
  svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", kLabel, kWidth - kRight,
                     axis_y, axis_y);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\">0 s</text>\n", kLabel, axis_y + 14);
  for (const auto& [tick, us] : t.clock_jumps) {
    svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#888\" "
                       "stroke-dasharray=\"4 3\"/><text x=\"{0:.1f}\" y=\"{3}\" font-size=\"10\">{4}</text>\n",
                       x(tick), kTop - 4, axis_y, axis_y + 26, seconds_text(static_cast<double>(us)));
  }
  const double scale = (kWidth - kLabel - kRight) / axis.span();
  for (const TimeAxis::Break& b : axis.breaks()) {
    const double bx = kLabel + b.at * scale;
    svg += fmt::format("<path d=\"M{0:.1f} {1} l4 -8 M{2:.1f} {1} l4 -8\" stroke=\"black\" stroke-width=\"1.5\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3}\" font-size=\"10\">+{4}</text>\n",
                       bx - 4, axis_y + 4, bx + 2, axis_y + 14,
                       seconds_text(static_cast<double>(b.to_tick - b.from_tick)));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text>\n", kWidth - kRight,
                     axis_y + 14, seconds_text(static_cast<double>(t.end_us)));
  for (const RankLane& lane : t.lanes) {
    const int y = kTop + lane.rank * lane_px;
    svg += fmt::format("<g class=\"lane\" data-rank=\"{}\">\n", lane.rank);
    if (lane_px >= 8)
      svg += fmt::format("<text x=\"4\" y=\"{}\">rank {} {}</text>\n", y + lane_px - 3, lane.rank,
                         xml_escape(lane.host));
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#eee\"/>\n", kLabel, kWidth - kRight,
                       y + lane_px, y + lane_px);
    for (const TimelineSlice& s : lane.slices)
      svg += fmt::format("<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>rank {}: {} "
                         "{} ({:.3f} s simulated)</title></rect>\n",
                         x(s.begin), y + 1, std::max(x(s.end) - x(s.begin), 0.8), std::max(lane_px - 2, 2),
                         step_colour(s.name), lane.rank, xml_escape(s.name), xml_escape(s.detail),
                         static_cast<double>(s.begin_us) / 1e6);
    for (const TimelineMark& m : lane.marks) {
      const double mx = x(m.at);
      if (m.error)
        svg += fmt::format("<path d=\"M{0:.1f} {1} l{2} {2} M{0:.1f} {3} l{2} -{2}\" transform=\"translate(-{4} 0)\" "
                           "stroke=\"black\" stroke-width=\"2\"><title>rank {5}: {6}</title></path>\n",
                           mx, y + 1, lane_px - 2, y + lane_px - 1, (lane_px - 2) / 2, lane.rank, xml_escape(m.detail));
      else
        svg += fmt::format("<path d=\"M{:.1f} {} l4 -{} l-8 0 z\" fill=\"red\"><title>rank {}: {}</title></path>\n",
                           mx, y + lane_px - 1, lane_px - 2, lane.rank, xml_escape(m.detail));
    }
    svg += "</g>\n";
  }
  // Errors as text a reader sees without hovering.
  int ty = axis_y + 44;
  if (!errors.empty()) {
    svg += fmt::format("<text x=\"10\" y=\"{}\" font-size=\"11\" font-weight=\"bold\">errors</text>\n", ty);
    size_t shown = 0;
    for (const auto& [detail, ranks] : errors) {
      if (++shown > 20) break;
      ty += 16;
      std::string text = detail.size() > 200 ? detail.substr(0, 200) + "..." : detail;
      svg += fmt::format("<text x=\"10\" y=\"{}\" font-size=\"11\">rank{} {}: {}</text>\n", ty,
                         ranks.size() == 1 ? "" : "s", rank_ranges(ranks), xml_escape(text));
    }
  }
  svg += "</svg>\n";
  return svg;
}

Status write_run_drawings(const EmulatedOutcome& out, const std::string& title, const std::string& trace_path,
                          const std::string& svg_path) {
  const RunTimeline timeline = build_run_timeline(out, title);
  if (!trace_path.empty()) ENGRAM_RETURN_IF_ERROR(write_output_file(trace_path, trace_event_json(timeline), "the --trace file"));
  if (!svg_path.empty()) ENGRAM_RETURN_IF_ERROR(write_output_file(svg_path, timeline_svg(timeline), "the --timeline SVG"));
  return Status::ok();
}

std::string drawing_path_for(const std::string& path, const std::string& name) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + "." + name;
  return path.substr(0, dot) + "." + name + path.substr(dot);
}

}  // namespace engram::harness
