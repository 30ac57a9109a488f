#include "harness/step_times.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/base/check.h"
#include "core/base/text_list.h"

namespace engram::harness {
namespace {

bool same_values(const RankStepSummary& a, const RankStepSummary& b) {
  return a.steps == b.steps && a.p50_us == b.p50_us && a.max_us == b.max_us && a.waited_max_us == b.waited_max_us &&
         a.waited_total_us == b.waited_total_us;
}

std::string rank_words(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", compress_ranges(ranks));
}

// One bound (p50 or max) of one entry over its ranks.
void check_bound(const char* what, double bound_us, double RankStepSummary::*field,
                 const std::vector<const RankStepSummary*>& ranks, std::vector<std::string>& failures) {
  std::vector<int> within;
  double within_max_us = 0;
  for (const RankStepSummary* s : ranks)
    if (s->*field <= bound_us) {
      within.push_back(s->rank);
      within_max_us = std::max(within_max_us, s->*field);
    }
  const std::string others =
      within.empty() ? std::string()
                     : fmt::format("; {} within it (at most {:.3f} us)", rank_words(within), within_max_us);
  for (const RankStepSummary* s : ranks)
    if (s->*field > bound_us)
      failures.push_back(fmt::format("step_time_us_max: rank {}'s {} lookup step takes {:.3f} us (the step model's "
                                     "time over {} steps), above the {} us expected{}",
                                     s->rank, what, s->*field, s->steps, bound_us, others));
}

}  // namespace

std::vector<RankStepSummary> summarize_step_times(const std::vector<sim::RankStepTimes>& times) {
  std::vector<RankStepSummary> out;
  for (size_t r = 0; r < times.size(); ++r) {
    const sim::RankStepTimes& t = times[r];
    ENGRAM_CHECK(t.waited_us.size() <= t.step_us.size());
    RankStepSummary s;
    s.rank = static_cast<int>(r);
    s.steps = t.step_us.size();
    if (!t.step_us.empty()) {
      std::vector<double> sorted = t.step_us;
      std::sort(sorted.begin(), sorted.end());
      s.p50_us = sorted[(sorted.size() - 1) / 2];
      s.max_us = sorted.back();
    }
    for (sim::SimTimeUs w : t.waited_us) {
      s.waited_max_us = std::max(s.waited_max_us, w);
      s.waited_total_us += w;
    }
    out.push_back(s);
  }
  return out;
}

std::vector<StepTimeGroup> fold_step_times(const std::vector<RankStepSummary>& summaries) {
  std::vector<StepTimeGroup> groups;
  for (const RankStepSummary& s : summaries) {
    auto same = std::find_if(groups.begin(), groups.end(),
                             [&](const StepTimeGroup& g) { return same_values(g.summary, s); });
    if (same == groups.end()) same = groups.insert(groups.end(), StepTimeGroup{{}, s});
    same->ranks.push_back(s.rank);
  }
  return groups;
}

std::vector<std::string> step_time_lines(const std::vector<RankStepSummary>& summaries) {
  std::vector<std::string> lines;
  for (const StepTimeGroup& g : fold_step_times(summaries)) {
    const RankStepSummary& s = g.summary;
    if (s.steps == 0)
      lines.push_back(fmt::format("{}: no lookup step", rank_words(g.ranks)));
    else
      lines.push_back(fmt::format("{}: {} steps, p50 {:.3f} us, max {:.3f} us, waited on peers max {} us, {} us in all",
                                  rank_words(g.ranks), s.steps, s.p50_us, s.max_us, s.waited_max_us,
                                  s.waited_total_us));
  }
  return lines;
}

void check_step_times(const std::vector<ExpectedStepTime>& expected, const std::vector<RankStepSummary>& summaries,
                      std::vector<std::string>& failures) {
  const int world = static_cast<int>(summaries.size());
  if (world == 0 && !expected.empty()) {
    failures.push_back("step_time_us_max: no rank timed a lookup step: the run had no step model (plan refused the "
                       "deployment, or the emulator did not run it)");
    return;
  }
  for (const ExpectedStepTime& x : expected) {
    const int last = x.last_rank < 0 ? world - 1 : x.last_rank;
    if (last >= world) {
      failures.push_back(fmt::format("step_time_us_max names rank {}, but the job has {} ranks (0..{})", last, world,
                                     world - 1));
      continue;
    }
    std::vector<const RankStepSummary*> timed;
    std::vector<int> untimed;
    for (int r = x.first_rank; r <= last; ++r) {
      const RankStepSummary& s = summaries[static_cast<size_t>(r)];
      if (s.steps == 0) untimed.push_back(r);
      else timed.push_back(&s);
    }
    if (!untimed.empty())
      failures.push_back(fmt::format("step_time_us_max: {} timed no lookup step, so nothing bounds it; a bound needs "
                                     "ranks that looked up (lookup.run: true, the rank started)",
                                     rank_words(untimed)));
    if (x.p50_us) check_bound("p50", *x.p50_us, &RankStepSummary::p50_us, timed, failures);
    if (x.max_us) check_bound("slowest", *x.max_us, &RankStepSummary::max_us, timed, failures);
  }
}

}  // namespace engram::harness
