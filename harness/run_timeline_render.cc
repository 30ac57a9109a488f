// The two drawings of a RunTimeline (harness/run_timeline.h): trace-event
// JSON for Perfetto / chrome://tracing, and a standalone SVG.
#include <fmt/format.h>

#include <algorithm>

#include "core/base/xml_escape.h"
#include "core/base/file_replace.h"
#include "core/base/json_output.h"
#include "harness/run_timeline.h"

namespace engram::harness {
namespace {

Json slice_args(const RunTimeline& t, const TimelineSlice& s) {
  Json args = {{"simulated_us", s.begin_us}, {"simulated_end_us", s.end_us}};
  if (!s.detail.empty()) args["detail"] = s.detail;
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

std::string timeline_svg(const RunTimeline& t) {
  constexpr int kWidth = 1400, kLabel = 190, kTop = 70, kRight = 20;
  const int lane_px = t.lanes.size() > 200 ? 4 : t.lanes.size() > 40 ? 10 : 18;
  const int height = kTop + static_cast<int>(t.lanes.size()) * lane_px + 40;
  const double span = static_cast<double>(std::max<uint64_t>(t.end, 1));
  auto x = [&](uint64_t tick) { return kLabel + (kWidth - kLabel - kRight) * static_cast<double>(tick) / span; };
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"{}\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n"
      "<text x=\"10\" y=\"38\" font-size=\"11\">ranks down; across: simulated time, each event one tick more "
      "(dashed lines: the clock jumps); red marks: faults; black crosses: errors; ends at {:.3f} s simulated</text>\n",
      kWidth, height, kWidth, height, std::max(lane_px - 2, 6), xml_escape(t.title), static_cast<double>(t.end_us) / 1e6);
  // Legend.
  double lx = 10;
  for (const char* name : {"collective", "create", "export", "send", "import", "shm_create", "stalled"}) {
    svg += fmt::format("<rect x=\"{:.0f}\" y=\"47\" width=\"12\" height=\"10\" fill=\"{}\"/><text x=\"{:.0f}\" "
                       "y=\"56\" font-size=\"10\">{}</text>\n",
                       lx, step_colour(name), lx + 15, name);
    lx += 95;
  }
  for (const auto& [tick, us] : t.clock_jumps)
    svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#888\" "
                       "stroke-dasharray=\"4 3\"/><text x=\"{0:.1f}\" y=\"{3}\" font-size=\"10\">{4:.3g} s</text>\n",
                       x(tick), kTop - 4, height - 30, height - 18, static_cast<double>(us) / 1e6);
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
