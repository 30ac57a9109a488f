#include "harness/run_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <set>

namespace engram::harness {
namespace {

// A rank's open step, closed by its next step, its leaving a collective or its end.
struct Open {
  bool open = false;
  TimelineSlice slice;
};

class Builder {
 public:
  Builder(const EmulatedOutcome& out, RunTimeline& t) : out_(out), t_(t), open_(out.ranks.size()) {}

  void event(const sim::Scheduler::TimelineEvent& e) {
    const char* s = e.text.c_str();
    char word[64] = {0}, word2[64] = {0};
    int a = -1, b = -1, c = -1;
    unsigned long long n = 0;
    long long tokens = 0;
    double x = 0, y = 0;
    now_us_ = e.at_us;
    if (std::sscanf(s, "run %d", &a) == 1) return;  // scheduling, not a step
    ++tick_;
    if (std::sscanf(s, "clock %llu", &n) == 1) {
      t_.clock_jumps.push_back({tick(), n});
    } else if (std::sscanf(s, "%63s g%d #%d arrive %d", word, &a, &b, &c) == 4) {
      begin(c, word, fmt::format("#{}", b), a);
      auto& members = t_.groups[a];
      if (std::find(members.begin(), members.end(), c) == members.end()) members.push_back(c);
    } else if (e.text == "leave") {
      close(e.rank);
    } else if (std::sscanf(s, "finish %d", &a) == 1) {
      close(a);
    } else if (std::sscanf(s, "import r%d from r%d", &a, &b) == 2) {
      begin(a, "import", fmt::format("from r{}", b));
    } else if (std::sscanf(s, "send_fd r%d -> r%d", &a, &b) == 2) {
      begin(a, "send", fmt::format("to r{}", b));
    } else if (std::sscanf(s, "recv_fd r%d <- r%d", &a, &b) == 2) {
      begin(a, "receive", fmt::format("from r{}", b));
    } else if (std::sscanf(s, "shm_create r%d %63s", &a, word) == 2) {
      begin(a, "shm_create", word);
    } else if (std::sscanf(s, "create r%d %llu %63s", &a, &n, word) == 3) {
      begin(a, "create", fmt::format("{} bytes, {}", n, word));
    } else if (std::sscanf(s, "export r%d %63s", &a, word) == 2) {
      begin(a, "export", word);
    } else if (std::sscanf(s, "fault %63s rank %d", word, &a) == 2) {
      mark(a, fmt::format("fault {}", word), false, e.text);
    } else if (std::sscanf(s, "death rank %d", &a) == 1) {
      mark(a, "fault rank_death", false, e.text);
    } else if (std::sscanf(s, "hang rank %d at %63s", &a, word) == 2) {
      mark(a, "fault hang", false, e.text);
    } else if (std::sscanf(s, "slow rank %d at %63s for %llu", &a, word, &n) == 3) {
      mark(a, "fault slow", false, e.text);
      begin(a, "stalled", fmt::format("{} us at {}", n, word));
    } else if (std::sscanf(s, "slow rank %d at %63s links x%lf gpu x%lf", &a, word, &x, &y) == 4) {
      mark(a, "fault slow", false, e.text);  // slower links / GPU from here: its lookup steps show it
    } else if (std::sscanf(s, "lookup r%d %lld tokens %lf us", &a, &tokens, &x) == 3) {
      begin(a, "lookup", fmt::format("{} tokens, model {:.3f} us", tokens, x));
      if (valid(a)) open_[static_cast<size_t>(a)].slice.model_us = x;
    } else if (std::sscanf(s, "lookup r%d waited %llu us", &a, &n) == 2) {
      close(a);  // its step ended (a collective in it closed at leaving)
      if (valid(a)) {
        auto& slices = t_.lanes[static_cast<size_t>(a)].slices;
        auto step = std::find_if(slices.rbegin(), slices.rend(),
                                 [](const TimelineSlice& sl) { return sl.name == "lookup"; });
        if (step != slices.rend()) {
          step->waited_us = n;
          step->detail += fmt::format(", then waited {} us on peers", n);
        }
      }
    } else if (std::sscanf(s, "hang %d", &a) == 1) {
      begin(a, "hung", "");
    } else if (std::sscanf(s, "abort g%d at %llu by %d", &a, &n, &b) == 3) {
      mark(b, fmt::format("abort g{}", a), true, e.text);
    } else if (std::sscanf(s, "%63s", word2) == 1) {
      --tick_;  // not drawn (dead, drop_fd, shm_remote_numa, ...)
    }
  }

  void finish() {
    ++tick_;
    for (size_t r = 0; r < open_.size(); ++r) close(static_cast<int>(r));
    for (RankLane& lane : t_.lanes) {
      const Status& s = out_.world.statuses.size() > static_cast<size_t>(lane.rank)
                            ? out_.world.statuses[static_cast<size_t>(lane.rank)]
                            : Status::ok();
      if (s.is_ok()) continue;
      lane.status = fmt::format("{} (step {})", error_code_name(s.code()), s.context().step.empty() ? "?" : s.context().step);
      const uint64_t at = lane.slices.empty() ? tick() : lane.slices.back().end;
      lane.marks.push_back({fmt::format("error {}", error_code_name(s.code())), true, at, now_us_, s.to_string()});
    }
    for (auto& [id, members] : t_.groups) std::sort(members.begin(), members.end());
    t_.end = tick();
    t_.end_us = now_us_;
  }

 private:
  uint64_t tick() const { return now_us_ + tick_; }
  bool valid(int rank) const { return rank >= 0 && static_cast<size_t>(rank) < open_.size(); }

  void begin(int rank, const std::string& name, std::string detail, int group = -1) {
    if (!valid(rank)) return;
    close(rank);
    Open& o = open_[static_cast<size_t>(rank)];
    o.open = true;
    o.slice = {name, tick(), tick(), now_us_, now_us_, group, std::move(detail)};
    t_.lanes[static_cast<size_t>(rank)].last_step = name;
  }

  void close(int rank) {
    if (!valid(rank)) return;
    Open& o = open_[static_cast<size_t>(rank)];
    if (!o.open) return;
    o.open = false;
    o.slice.end = std::max(tick(), o.slice.begin + 1);
    o.slice.end_us = now_us_;
    t_.lanes[static_cast<size_t>(rank)].slices.push_back(o.slice);
  }

  void mark(int rank, std::string name, bool error, const std::string& detail) {
    if (!valid(rank)) return;
    t_.lanes[static_cast<size_t>(rank)].marks.push_back({std::move(name), error, tick(), now_us_, detail});
  }

  const EmulatedOutcome& out_;
  RunTimeline& t_;
  std::vector<Open> open_;
  uint64_t tick_ = 0;
  sim::SimTimeUs now_us_ = 0;
};

}  // namespace

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ", ",
                       i == j ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  return out;
}

RunTimeline build_run_timeline(const EmulatedOutcome& out, std::string title) {
  RunTimeline t;
  t.title = std::move(title);
  for (size_t r = 0; r < out.ranks.size(); ++r) {
    RankLane lane;
    lane.rank = static_cast<int>(r);
    if (r < out.deployment.rank_hosts.size()) {
      const size_t host = static_cast<size_t>(out.deployment.rank_hosts[r]);
      if (host < out.deployment.hosts.size()) lane.host = out.deployment.hosts[host].name;
    }
    t.lanes.push_back(std::move(lane));
  }
  Builder builder(out, t);
  for (const sim::Scheduler::TimelineEvent& e : out.world.timeline) builder.event(e);
  builder.finish();
  return t;
}

}  // namespace engram::harness
