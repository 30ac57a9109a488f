// Deterministic interleaving of emulated ranks, in simulated time. Each rank
// is a user-space task (a Boost.Context fiber with its own stack) on the
// calling thread; at every blocking point the rank switches back to the
// scheduler, which resumes a runnable rank chosen by the seed. No OS thread
// per rank and no OS scheduling anywhere in the path: the same seed gives the
// same interleaving on any machine under any load, and the trace hash
// proves it.
//
// The clock: a rank that waits may name a deadline in simulated time. When
// no rank can run, the clock jumps to the earliest deadline and those ranks
// wake timed out; so a rank that never arrives makes its peers fail after the
// simulated timeout without any wall time passing. A rank can also stall for
// a while (sleep_for) or stop for good (hang); when only hung ranks remain,
// they are reaped, as a launcher tears down a job whose other ranks ended.
// A rank still parked with no deadline when nothing else can happen is a
// deadlock (every blocking step is meant to have a deadline): it wakes stuck,
// and the run counts it.
//
// Everything a rank touches in the emulator is touched only while it runs;
// one thread runs them all, so emulator state needs no locks.
#pragma once

#include <fmt/compile.h>
#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/seed.h"

// Records a trace event, its format compiled: ENGRAM_TRACE(scheduler, "run {}", rank).
#define ENGRAM_TRACE(scheduler, format, ...) (scheduler).recordf(FMT_COMPILE(format), __VA_ARGS__)

namespace engram::sim {

// Simulated time in microseconds since the run began.
using SimTimeUs = uint64_t;
inline constexpr SimTimeUs kNoDeadline = std::numeric_limits<SimTimeUs>::max();

class FiberStackRegion;

class Scheduler {
 public:
  explicit Scheduler(uint64_t seed);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Runs body(rank) for ranks [0, rank_count) and returns when all are done.
  // An exception escaping a body ends the run and is rethrown here.
  void run(int rank_count, const std::function<void(int rank)>& body);

  // From a rank: let a runnable rank chosen by the seed run (possibly this
  // one). A point where another rank may overtake this one.
  void yield();

  enum class Wake {
    kReady,     // the condition holds
    kTimedOut,  // the deadline passed first
    kStuck,     // nothing else could happen and this wait had no deadline
  };
  // What a parked rank waits on: notify(key) re-checks only the ranks parked
  // on that key, so a collective of N ranks costs O(N) in all, not a scan of
  // every parked rank in the world per arrival. Components build keys with
  // wait_key(); 0 means "woken by notify_all only".
  using WaitKey = uint64_t;
  enum class KeySpace : uint8_t {
    kFinished = 1,    // (rank): the rank's body returned
    kCollective = 2,  // (group id, call number): every member arrived
    kFdQueue = 3,     // (receiver, sender): an fd arrived
  };
  static constexpr WaitKey wait_key(KeySpace space, uint64_t a, uint64_t b = 0) {
    return (static_cast<uint64_t>(space) << 58) | ((a & 0x1fffffff) << 29) | (b & 0x1fffffff);
  }
  static constexpr WaitKey finished_key(int rank) { return wait_key(KeySpace::kFinished, static_cast<uint64_t>(rank)); }

  // From a rank: park until `ready()` holds or the simulated clock reaches
  // `deadline`. Re-checked by notify(k) for each k in `keys`, and by
  // notify_all(). Whoever changes what `ready` reads must notify one of
  // `keys` (or all): a missed wake-up is caught as an emulator bug.
  Wake wait_until(const std::function<bool()>& ready, SimTimeUs deadline = kNoDeadline,
                  std::initializer_list<WaitKey> keys = {});

  // From a rank: stall for `duration_us` of simulated time (others run meanwhile).
  void sleep_for(SimTimeUs duration_us);

  // From a rank: stop making progress for good. Returns only when every
  // other rank has finished or hung too (the launcher reaps the job).
  void hang();

  // From a rank: state changed; parked ranks re-check their conditions.
  // notify(key) re-checks the ranks parked on `key`; notify_all() every
  // parked rank (for rare events that many waits depend on: a death, an
  // aborted group).
  void notify(WaitKey key);
  void notify_all();

  SimTimeUs now_us() const { return now_us_; }
  int current_rank() const { return current_; }
  int rank_count() const { return static_cast<int>(ranks_.size()); }
  bool rank_finished(int rank) const;

  // Trace: every scheduling decision and every event a component records.
  void record(std::string_view event);
  // record(fmt::format(...)) without building a string on the heap. The
  // format is compiled where it is written (the ENGRAM_TRACE macro): ranks
  // record an event at every import and arrival, so parsing it each time
  // cost more than the event.
  template <typename CompiledFormat, typename... Args>
  void recordf(const CompiledFormat& format, const Args&... args) {
    fmt::memory_buffer text;
    fmt::format_to(fmt::appender(text), format, args...);
    record(std::string_view(text.data(), text.size()));
  }
  uint64_t trace_hash() const { return trace_hash_; }
  uint64_t switch_count() const { return switches_; }
  // Ranks that waited with no deadline when nothing else could happen.
  uint64_t deadlock_count() const { return deadlocks_; }
  // Keep the event text too (for diffs between runs); off by default.
  void keep_trace_text(bool keep) { keep_text_ = keep; }
  const std::string& trace_text() const { return trace_text_; }

  // Keep every event with its simulated time and the rank that ran it, for
  // drawing a run (harness/run_timeline.h); off by default.
  struct TimelineEvent {
    SimTimeUs at_us = 0;
    int rank = -1;  // the rank running when it was recorded; -1: the scheduler itself
    std::string text;
  };
  void keep_timeline(bool keep) { keep_timeline_ = keep; }
  const std::vector<TimelineEvent>& timeline() const { return timeline_; }
  // An event for the timeline only, outside the trace hash (so marking a
  // step's end never changes a run's hash): e.g. a rank leaving a collective.
  void mark(std::string_view event) {
    if (keep_timeline_) timeline_.push_back({now_us_, current_, std::string(event)});
  }

  // Bytes of stack each rank gets (its fiber's; a guard page below it).
  static size_t stack_bytes();


 private:
  enum class State { kRunnable, kParked, kHung, kFinished };
  struct RankSlot;

  // Parks the current rank and runs others until it is made runnable again.
  void park_current();
  int pick_next();
  // No rank is runnable: advance the clock, reap hung ranks or break a deadlock.
  void unblock();
  void make_ready(int rank);
  // Wakes `rank` if it is parked in a wait_until whose condition holds now.
  bool wake_if_ready(int rank);
  // The contract behind keyed wake-ups, checked whenever nothing can run:
  // no parked rank's condition holds (else a notify was missed).
  void check_no_missed_wake() const;

  Rng rng_;
  std::unique_ptr<FiberStackRegion> stacks_;  // declared before ranks_: their fibers unwind on it
  std::vector<std::unique_ptr<RankSlot>> ranks_;
  std::vector<int> ready_;   // ranks that may run now
  std::vector<int> parked_;  // ranks waiting for a notify (with or without a deadline)
  // Ranks parked on each key, with the wait they parked in (stale entries,
  // whose wait ended otherwise, are dropped when the key is notified).
  struct Waiter {
    int rank;
    uint64_t park;  // RankSlot::park when it parked
  };
  std::unordered_map<WaitKey, std::vector<Waiter>> waiters_;
  // (deadline, order, rank, wait number): lazily deleted when the wait ended otherwise.
  struct Timer {
    SimTimeUs deadline;
    uint64_t order;
    int rank;
    uint64_t wait;
    bool operator>(const Timer& o) const { return deadline != o.deadline ? deadline > o.deadline : order > o.order; }
  };
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  uint64_t timer_order_ = 0;
  int live_ = 0;
  int hung_ = 0;
  int current_ = -1;
  SimTimeUs now_us_ = 0;
  uint64_t trace_hash_ = 0xcbf29ce484222325ull;
  uint64_t switches_ = 0;
  uint64_t deadlocks_ = 0;
  bool keep_text_ = false;
  std::string trace_text_;
  bool keep_timeline_ = false;
  std::vector<TimelineEvent> timeline_;
};

}  // namespace engram::sim
