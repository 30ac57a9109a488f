// Progress of long work on stderr (fuzz sweeps, scenario runs, table fills,
// benchmarks): nothing for work that ends within about two seconds, then one
// line updated in place on a terminal. When stderr is not a terminal it stays
// quiet unless asked (ENGRAMLAB_PROGRESS=1 or a command's --progress), and
// then prints a plain line every few seconds, so logs stay readable.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace engram {

enum class ProgressMode : uint8_t {
  kAuto,    // on when stderr is a terminal or ENGRAMLAB_PROGRESS=1
  kAlways,  // --progress
  kNever,
};

class Progress {
 public:
  // `what` names the work ("fuzz"), `unit` what is counted ("seeds").
  Progress(std::string what, std::string unit, uint64_t total, ProgressMode mode = ProgressMode::kAuto,
           FILE* out = stderr);
  ~Progress();  // ends an in-place line with a newline
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` of `total` finished; cheap enough to call on every item.
  void update(uint64_t done);
  // What is being worked on now ("nvl72_16_racks"), shown after the count.
  void set_item(std::string item);
  // Redraws by itself every `every` (from a thread of its own) until
  // destroyed, so one long item still shows the time going by.
  void keep_ticking();
  bool enabled() const { return enabled_; }
  // Lines written so far (tests).
  int lines_written() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }

  // For tests: how long to stay quiet, how often to redraw.
  void set_timing(std::chrono::milliseconds quiet, std::chrono::milliseconds every);

 private:
  using Clock = std::chrono::steady_clock;
  void draw(uint64_t done);
  void maybe_draw(uint64_t done, bool forced);

  mutable std::mutex mutex_;  // draws come from the caller and the ticker
  std::string item_;
  std::atomic<uint64_t> done_{0};
  std::thread ticker_;
  std::condition_variable stop_ticker_;
  bool stopping_ = false;
  std::string what_, unit_;
  uint64_t total_ = 0;
  FILE* out_ = nullptr;
  bool enabled_ = false;
  bool terminal_ = false;
  bool drawn_in_place_ = false;
  int lines_ = 0;
  Clock::time_point started_, last_;
  std::chrono::milliseconds quiet_{2000};
  std::chrono::milliseconds every_{250};
};

}  // namespace engram
