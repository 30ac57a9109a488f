// A run drawn as what every rank did when (`--trace FILE`, `--timeline
// FILE.svg`): the scheduler's timeline events (sim/scheduler.h) read back as
// one lane per rank of steps (create, export, send, receive, import,
// shm_create, each lookup step with its model time, each collective from
// arrival to leaving it), fault firings and errors as marks, and the groups
// each collective ran in.
//
// Time: the emulator's clock is simulated and moves only where a wait times
// out, a rank stalls or a lookup step takes its model time (whole
// microseconds), so most other steps share one instant. Each event kept
// therefore also advances a display tick (one microsecond in the trace): a
// step's ts is its simulated time plus the events before it, so steps of one
// instant show in order and the clock's jumps stay in view (args hold the
// simulated time itself).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/emulated_scenario.h"

namespace engram::harness {

struct TimelineSlice {
  std::string name;      // "import", "all_gather", ...
  uint64_t begin = 0;    // display ticks
  uint64_t end = 0;
  sim::SimTimeUs begin_us = 0;  // simulated time
  sim::SimTimeUs end_us = 0;
  int group = -1;        // collectives: the group's id
  std::string detail;    // "from r3", "#2"
  // lookup steps: the step model's time of the rank's own part (the slice's
  // first stretch of the clock), and what it then waited on its peers.
  std::optional<double> model_us;
  std::optional<uint64_t> waited_us;
};

struct TimelineMark {
  std::string name;    // "fault import", "error unavailable"
  bool error = false;  // else a fault firing
  uint64_t at = 0;     // display ticks
  sim::SimTimeUs at_us = 0;
  std::string detail;
};

struct RankLane {
  int rank = 0;
  std::string host;
  std::vector<TimelineSlice> slices;
  std::vector<TimelineMark> marks;
  std::string status = "ok";  // "ok" or "<error kind> (step <step>)"
  std::string last_step = "-";
};

struct RunTimeline {
  std::string title;
  std::vector<RankLane> lanes;                 // by rank
  std::map<int, std::vector<int>> groups;      // group id -> member world ranks
  std::vector<std::pair<uint64_t, sim::SimTimeUs>> clock_jumps;  // (tick, new simulated time)
  uint64_t end = 0;                            // display ticks
  sim::SimTimeUs end_us = 0;
};

// `out` must come from a job run with keep_timeline.
RunTimeline build_run_timeline(const EmulatedOutcome& out, std::string title);

// "0-3, 8" for sorted ranks.
std::string rank_ranges(const std::vector<int>& ranks);

// The Chrome/Perfetto JSON trace-event format: pid 1, tid = rank, B/E per
// step, "i" per fault and error, group membership in args.
std::string trace_event_json(const RunTimeline& timeline);

// Swimlanes as standalone SVG: ranks down, display time across, faults and
// errors marked, clock jumps drawn as dashed lines.
std::string timeline_svg(const RunTimeline& timeline);

// Writes the run's trace to `trace_path` and its SVG to `svg_path` (each
// skipped when empty). Errors name the path and the fix.
Status write_run_drawings(const EmulatedOutcome& out, const std::string& title, const std::string& trace_path,
                          const std::string& svg_path);

// `path` for one of several runs: "t.json" -> "t.<name>.json".
std::string drawing_path_for(const std::string& path, const std::string& name);

}  // namespace engram::harness
