// `plan --sweep ... --sweep-svg FILE`: the sweep's frontier as a standalone
// SVG (no scripts, no external fonts). One point per planned deployment and
// asked placement: x the slowest rank's step time at the sweep's first token
// count (log scale), y the KV cache left on the tightest host, the point's
// area the host table bytes per node, its colour the placement built; a
// black ring marks what the engine builds by its defaults, a hollow point a
// deployment that is planned but cannot run, and the line joins the
// frontier (no fitting point both faster and with more KV cache left). What
// is refused has no step time: it is counted under the plot, by reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engram::app {

struct SweepPoint {
  std::string label;        // "tp2 dp4 /dev/shm 1 TiB": shown on hover (title)
  std::string placement;    // what the plan built ("" where refused)
  bool engine_default = false;
  bool fits = false;        // planned and fits; false with a step time: planned, cannot run
  bool refused = false;     // no plan: reason says why
  std::string reason;       // the verdict's first words, for the refused count
  double step_us = 0;       // > 0 where planned
  double kv_left_gib = 0;   // may be negative (over the memory)
  double host_gib_per_node = 0;
};

// The SVG document. `title` heads it; `tokens` is the token count of step_us.
std::string render_sweep_svg(const std::vector<SweepPoint>& points, const std::string& title, int tokens);

}  // namespace engram::app
