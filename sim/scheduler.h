// Deterministic interleaving of emulated ranks. Each rank runs on its own
// thread, but exactly one holds the baton at a time; at every blocking point
// the baton goes to a runnable rank chosen by the seed. So the same seed gives
// the same interleaving, whatever the OS does, and the trace hash proves it.
//
// Everything a rank touches in the emulator is touched only while it holds
// the baton; the semaphore hand-off orders those accesses, so emulator state
// needs no locks of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <semaphore>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sim/seed.h"

namespace engram::sim {

class Scheduler {
 public:
  explicit Scheduler(uint64_t seed);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Runs body(rank) for ranks [0, rank_count) and returns when all are done.
  void run(int rank_count, const std::function<void(int rank)>& body);

  // From a rank: give the baton to a runnable rank chosen by the seed
  // (possibly this one). A point where another rank may overtake this one.
  void yield();

  // From a rank: park until `ready()` is true. Re-checked after notify_all().
  // Returns false when every live rank is parked and none is ready (a
  // deadlock: the ranks it waits for are dead or never came).
  bool wait_until(const std::function<bool()>& ready);

  // From a rank: state changed; parked ranks re-check their conditions.
  void notify_all();

  int current_rank() const { return current_; }
  int rank_count() const { return static_cast<int>(ranks_.size()); }
  bool rank_finished(int rank) const { return ranks_[static_cast<size_t>(rank)]->finished; }

  // Trace: every scheduling decision and every event a component records.
  void record(std::string_view event);
  uint64_t trace_hash() const { return trace_hash_; }
  uint64_t switch_count() const { return switches_; }
  // Keep the event text too (for diffs between runs); off by default.
  void keep_trace_text(bool keep) { keep_text_ = keep; }
  const std::string& trace_text() const { return trace_text_; }

 private:
  enum class State { kRunnable, kParked, kParkedReady, kFinished };
  struct RankSlot {
    std::binary_semaphore baton{0};
    State state = State::kRunnable;
    bool finished = false;
    bool deadlocked = false;
    const std::function<bool()>* waiting_for = nullptr;  // while parked in wait_until
  };

  // Picks the next rank to hold the baton and hands it over; the caller
  // (current rank or the driver) then waits on its own semaphore.
  void hand_off_from(int rank);
  int pick_next();

  Rng rng_;
  std::vector<std::unique_ptr<RankSlot>> ranks_;
  std::vector<int> ready_;   // ranks that may run now
  std::vector<int> parked_;  // ranks waiting for a notify
  std::binary_semaphore all_done_{0};
  int live_ = 0;
  int current_ = -1;
  uint64_t trace_hash_ = 0xcbf29ce484222325ull;
  uint64_t switches_ = 0;
  bool keep_text_ = false;
  std::string trace_text_;
};

}  // namespace engram::sim
