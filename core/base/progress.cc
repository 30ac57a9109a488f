#include "core/base/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <system_error>

namespace engram {

Progress::Progress(std::string what, std::string unit, uint64_t total, ProgressMode mode, FILE* out)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total), out_(out) {
  terminal_ = out_ != nullptr && ::isatty(::fileno(out_)) == 1;
  const char* forced = std::getenv("ENGRAMLAB_PROGRESS");
  const bool asked = forced != nullptr && std::strcmp(forced, "1") == 0;
  switch (mode) {
    case ProgressMode::kAuto: enabled_ = out_ != nullptr && (terminal_ || asked); break;
    case ProgressMode::kAlways: enabled_ = out_ != nullptr; break;
    case ProgressMode::kNever: enabled_ = false; break;
  }
  // A log gets a plain line every few seconds, not a redraw four times a second.
  if (!terminal_) every_ = std::chrono::milliseconds(5000);
  started_ = last_ = Clock::now();
}

Progress::~Progress() {
  if (ticker_.joinable()) {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    stop_ticker_.notify_all();
    ticker_.join();
  }
  if (drawn_in_place_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

void Progress::set_timing(std::chrono::milliseconds quiet, std::chrono::milliseconds every) {
  quiet_ = quiet;
  every_ = every;
}

void Progress::update(uint64_t done) {
  done_ = done;
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  maybe_draw(done, false);
}

void Progress::set_item(std::string item) {
  std::lock_guard lock(mutex_);
  item_ = std::move(item);
}

void Progress::keep_ticking() {
  if (!enabled_ || ticker_.joinable()) return;
  try {
    ticker_ = std::thread([this] {
      std::unique_lock lock(mutex_);
      while (!stopping_) {
        stop_ticker_.wait_for(lock, every_);
        if (!stopping_) maybe_draw(done_, true);
      }
    });
  } catch (const std::system_error& e) {
    // No thread to spare (pids.max, RLIMIT_NPROC): the work goes on, and the
    // line is drawn as items finish instead of by the clock.
    std::lock_guard lock(mutex_);
    std::fputs(fmt::format("{}: progress is shown as items finish (no thread for the clock: {})\n", what_, e.what())
                   .c_str(),
               out_);
    std::fflush(out_);
  }
}

// Called with mutex_ held.
void Progress::maybe_draw(uint64_t done, bool forced) {
  const auto now = Clock::now();
  if (now - started_ < quiet_) return;
  if (!forced && lines_ > 0 && now - last_ < every_ && done != total_) return;
  last_ = now;
  draw(done);
}

void Progress::draw(uint64_t done) {
  const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  std::string line = fmt::format("{}: {} of {} {}", what_, done, total_, unit_);
  if (total_ > 0) line += fmt::format(" ({:.0f}%)", 100.0 * static_cast<double>(done) / static_cast<double>(total_));
  if (!item_.empty() && done < total_) line += fmt::format(", now {}", item_);
  line += fmt::format(", {:.1f} s", seconds);
  if (done > 0 && done < total_) {
    const double left = seconds / static_cast<double>(done) * static_cast<double>(total_ - done);
    line += fmt::format(", about {:.0f} s left", left);
  }
  if (terminal_) {
    std::fputs(("\r\033[K" + line).c_str(), out_);
    drawn_in_place_ = true;
  } else {
    std::fputs((line + "\n").c_str(), out_);
  }
  std::fflush(out_);
  ++lines_;
}

}  // namespace engram
