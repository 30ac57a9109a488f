#include "sim/scheduler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>
#include <exception>
#include <new>

#include "core/base/status.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define ENGRAM_SIM_ASAN 1
#else
#define ENGRAM_SIM_ASAN 0
#endif

namespace engram::sim {

namespace ctx = boost::context;

// Ranks' stacks: one anonymous region for the whole run, a slot per rank
// with a guard page below it, so an overflow faults instead of corrupting a
// neighbour. Only the pages a rank touches cost RSS, and the region goes back
// in one munmap when the run ends: a munmap per finished rank cost a TLB
// shootdown each (a fifth of a 1,152-rank start on a 2-core VM).
class FiberStackRegion {
 public:
  FiberStackRegion(size_t stack_bytes, size_t slots)
      : page_(static_cast<size_t>(::sysconf(_SC_PAGESIZE))), stack_bytes_(stack_bytes), slots_(slots) {
    ENGRAM_CHECK(stack_bytes_ % page_ == 0 && slots_ >= 1);
    base_ = static_cast<char*>(::mmap(nullptr, slot_bytes() * slots_, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (base_ == MAP_FAILED) throw std::bad_alloc();
  }
  ~FiberStackRegion() {
#if ENGRAM_SIM_ASAN
    // A later mapping at these addresses must not inherit stale poison.
    ASAN_UNPOISON_MEMORY_REGION(base_, slot_bytes() * slots_);
#endif
    ::munmap(base_, slot_bytes() * slots_);
  }
  FiberStackRegion(const FiberStackRegion&) = delete;
  FiberStackRegion& operator=(const FiberStackRegion&) = delete;

  // The slot's usable bottom; its guard page is set up here, on first use.
  char* bottom(size_t slot) {
    ENGRAM_CHECK(slot < slots_);
    char* guard = base_ + slot * slot_bytes();
    ENGRAM_CHECK(::mprotect(guard, page_, PROT_NONE) == 0);
    return guard + page_;
  }
  size_t stack_bytes() const { return stack_bytes_; }

 private:
  size_t slot_bytes() const { return stack_bytes_ + page_; }
  size_t page_;
  size_t stack_bytes_;
  size_t slots_;
  char* base_ = nullptr;
};

namespace {

// Boost.Context's stack allocator over one slot of the region.
struct SlotStack {
  FiberStackRegion* region;
  size_t slot;
  const void** bottom_out;  // where the rank's slot learns its stack (ASan needs it)

  ctx::stack_context allocate() {
    char* bottom = region->bottom(slot);
    ctx::stack_context sc;
    sc.size = region->stack_bytes();
    sc.sp = bottom + sc.size;  // stacks grow down from here
    *bottom_out = bottom;
    return sc;
  }
  void deallocate(ctx::stack_context&) {}  // the region goes back whole
};

}  // namespace

struct Scheduler::RankSlot {
  State state = State::kRunnable;
  bool finished = false;
  Wake wake = Wake::kReady;                          // why it last became runnable
  const std::function<bool()>* waiting_for = nullptr;  // parked in wait_until; null while sleeping
  uint64_t wait = 0;                                 // numbers this rank's waits (timer validity)
  uint64_t park = 0;                                 // numbers its parkings (keyed waiter validity)
  size_t parked_index = 0;                           // position in parked_ while parked
  ctx::fiber task;    // the rank's fiber while it is not running
  ctx::fiber driver;  // while it runs: the scheduler's loop, to switch back to
  const void* stack_bottom = nullptr;
  void* asan_fake_stack = nullptr;
};

size_t Scheduler::stack_bytes() {
  // Rank bodies run the whole runtime start (formatting, plan, exchange);
  // sanitizer builds grow every frame.
  return ENGRAM_SIM_ASAN ? (1u << 20) : (256u << 10);
}

Scheduler::Scheduler(uint64_t seed) : rng_(sub_seed(seed, "scheduler")) {}

Scheduler::~Scheduler() = default;

bool Scheduler::rank_finished(int rank) const { return ranks_[static_cast<size_t>(rank)]->finished; }

void Scheduler::record(std::string_view event) {
  trace_hash_ = fnv1a64(event, trace_hash_);
  trace_hash_ = fnv1a64("\n", trace_hash_);
  if (keep_text_) {
    trace_text_.append(event);
    trace_text_.push_back('\n');
  }
  if (keep_timeline_) timeline_.push_back({now_us_, current_, std::string(event)});
}

#if ENGRAM_SIM_ASAN
namespace {
// The scheduler loop's own stack, as AddressSanitizer learns it when the
// first fiber starts; fibers switch back to it.
thread_local const void* t_driver_stack_bottom = nullptr;
thread_local size_t t_driver_stack_bytes = 0;
}  // namespace
#endif

void Scheduler::run(int rank_count, const std::function<void(int)>& body) {
  ENGRAM_CHECK(rank_count >= 1);
  ENGRAM_CHECK(ranks_.empty());  // one run per scheduler
  ranks_.reserve(static_cast<size_t>(rank_count));
  for (int r = 0; r < rank_count; ++r) ranks_.push_back(std::make_unique<RankSlot>());
  live_ = rank_count;
  ready_.clear();
  for (int r = 0; r < rank_count; ++r) ready_.push_back(r);

  std::exception_ptr failure;
  const size_t stack = stack_bytes();
  stacks_ = std::make_unique<FiberStackRegion>(stack, static_cast<size_t>(rank_count));
  while (live_ > 0 && !failure) {
    if (ready_.empty()) unblock();
    const int next = pick_next();
    RankSlot& slot = *ranks_[static_cast<size_t>(next)];
    if (!slot.task) {
      // First run: the fiber starts here (created late, so ranks that have
      // not started cost no stack).
      slot.task = ctx::fiber(std::allocator_arg, SlotStack{stacks_.get(), static_cast<size_t>(next), &slot.stack_bottom},
                             [this, next, &body, &failure](ctx::fiber&& driver) {
                               RankSlot& me = *ranks_[static_cast<size_t>(next)];
                               me.driver = std::move(driver);
#if ENGRAM_SIM_ASAN
                               __sanitizer_finish_switch_fiber(nullptr, &t_driver_stack_bottom,
                                                               &t_driver_stack_bytes);
#endif
                               try {
                                 body(next);
                               } catch (const ctx::detail::forced_unwind&) {
                                 throw;  // the fiber is being destroyed: let Boost unwind it
                               } catch (...) {
                                 failure = std::current_exception();
                               }
                               me.state = State::kFinished;
                               me.finished = true;
                               --live_;
                               ENGRAM_TRACE(*this, "finish {}", next);
                               // A finished rank may be what parked ranks wait for (an fd
                               // receive from it): they wait on its "finished" key.
                               notify(finished_key(next));
#if ENGRAM_SIM_ASAN
                               __sanitizer_start_switch_fiber(nullptr, t_driver_stack_bottom, t_driver_stack_bytes);
#endif
                               return std::move(me.driver);
                             });
    }
    current_ = next;
#if ENGRAM_SIM_ASAN
    void* driver_fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&driver_fake_stack, slot.stack_bottom, stack);
#endif
    slot.task = std::move(slot.task).resume();
#if ENGRAM_SIM_ASAN
    __sanitizer_finish_switch_fiber(driver_fake_stack, nullptr, nullptr);
#endif
    current_ = -1;
  }
  if (failure) {
    // Unfinished fibers unwind as they are destroyed.
    for (auto& slot : ranks_) slot->task = {};
    std::rethrow_exception(failure);
  }
  ENGRAM_CHECK(live_ == 0 && ready_.empty() && parked_.empty() && hung_ == 0);
}

void Scheduler::park_current() {
  RankSlot& slot = *ranks_[static_cast<size_t>(current_)];
  ENGRAM_CHECK(slot.driver);
#if ENGRAM_SIM_ASAN
  __sanitizer_start_switch_fiber(&slot.asan_fake_stack, t_driver_stack_bottom, t_driver_stack_bytes);
#endif
  slot.driver = std::move(slot.driver).resume();
#if ENGRAM_SIM_ASAN
  __sanitizer_finish_switch_fiber(slot.asan_fake_stack, nullptr, nullptr);
#endif
}

int Scheduler::pick_next() {
  ENGRAM_CHECK(!ready_.empty());
  const size_t index = static_cast<size_t>(rng_.below(ready_.size()));
  const int next = ready_[index];
  ready_[index] = ready_.back();
  ready_.pop_back();
  ++switches_;
  ENGRAM_TRACE(*this, "run {}", next);
  return next;
}

void Scheduler::make_ready(int rank) {
  RankSlot& slot = *ranks_[static_cast<size_t>(rank)];
  if (slot.state == State::kParked) {
    // Out of parked_ in O(1): the last entry takes its place.
    const int last = parked_.back();
    parked_[slot.parked_index] = last;
    ranks_[static_cast<size_t>(last)]->parked_index = slot.parked_index;
    parked_.pop_back();
  }
  slot.state = State::kRunnable;
  ready_.push_back(rank);
}

void Scheduler::check_no_missed_wake() const {
  for (int p : parked_) {
    const RankSlot& slot = *ranks_[static_cast<size_t>(p)];
    ENGRAM_CHECK_MSG(slot.waiting_for == nullptr || !(*slot.waiting_for)(),
                     "emulator bug: rank parked on a condition that holds, and nothing notified it");
  }
}

void Scheduler::unblock() {
  check_no_missed_wake();
  // 1. The clock: jump to the earliest live deadline; those ranks time out.
  while (!timers_.empty()) {
    const Timer t = timers_.top();
    const RankSlot& slot = *ranks_[static_cast<size_t>(t.rank)];
    if (slot.state != State::kParked || slot.wait != t.wait) {
      timers_.pop();  // that wait ended otherwise
      continue;
    }
    ENGRAM_CHECK(t.deadline >= now_us_);
    now_us_ = t.deadline;
    ENGRAM_TRACE(*this, "clock {}", now_us_);
    while (!timers_.empty() && timers_.top().deadline == now_us_) {
      const Timer due = timers_.top();
      timers_.pop();
      RankSlot& s = *ranks_[static_cast<size_t>(due.rank)];
      if (s.state != State::kParked || s.wait != due.wait) continue;
      s.wake = Wake::kTimedOut;
      make_ready(due.rank);
    }
    return;
  }
  // 2. Only hung ranks left: the launcher reaps them.
  if (parked_.empty()) {
    ENGRAM_CHECK(hung_ > 0);
    record("reap hung");
    for (size_t r = 0; r < ranks_.size(); ++r) {
      RankSlot& s = *ranks_[r];
      if (s.state != State::kHung) continue;
      s.wake = Wake::kStuck;
      make_ready(static_cast<int>(r));
    }
    hung_ = 0;
    return;
  }
  // 3. Ranks wait with no deadline and nothing can wake them: a deadlock.
  // Wake them stuck so each can report whom it waited for.
  record("deadlock");
  const std::vector<int> stuck = parked_;
  for (int p : stuck) {
    ++deadlocks_;
    ranks_[static_cast<size_t>(p)]->wake = Wake::kStuck;
    make_ready(p);
  }
}

void Scheduler::yield() {
  const int me = current_;
  ENGRAM_CHECK(me >= 0);
  ranks_[static_cast<size_t>(me)]->state = State::kRunnable;
  ready_.push_back(me);
  park_current();
}

Scheduler::Wake Scheduler::wait_until(const std::function<bool()>& ready, SimTimeUs deadline,
                                      std::initializer_list<WaitKey> keys) {
  const int me = current_;
  ENGRAM_CHECK(me >= 0);
  RankSlot& slot = *ranks_[static_cast<size_t>(me)];
  if (ready()) return Wake::kReady;
  if (deadline <= now_us_) return Wake::kTimedOut;
  ++slot.wait;
  if (deadline != kNoDeadline) timers_.push({deadline, timer_order_++, me, slot.wait});
  for (;;) {
    slot.state = State::kParked;
    slot.waiting_for = &ready;
    slot.parked_index = parked_.size();
    parked_.push_back(me);
    ++slot.park;
    for (WaitKey key : keys) waiters_[key].push_back({me, slot.park});
    park_current();
    slot.waiting_for = nullptr;
    // Woken ready, but another rank may have taken what it waited for
    // before this one ran: wait again (the deadline's timer still stands).
    if (slot.wake != Wake::kReady || ready()) break;
  }
  return slot.wake;
}

void Scheduler::sleep_for(SimTimeUs duration_us) {
  const int me = current_;
  ENGRAM_CHECK(me >= 0);
  if (duration_us == 0) return;
  RankSlot& slot = *ranks_[static_cast<size_t>(me)];
  ++slot.wait;
  timers_.push({now_us_ + duration_us, timer_order_++, me, slot.wait});
  slot.state = State::kParked;
  slot.waiting_for = nullptr;  // notify_all never wakes a sleeper
  ++slot.park;
  slot.parked_index = parked_.size();
  parked_.push_back(me);
  park_current();
  ENGRAM_CHECK(slot.wake == Wake::kTimedOut);
}

void Scheduler::hang() {
  const int me = current_;
  ENGRAM_CHECK(me >= 0);
  RankSlot& slot = *ranks_[static_cast<size_t>(me)];
  ENGRAM_TRACE(*this, "hang {}", me);
  slot.state = State::kHung;
  ++hung_;
  park_current();
  ENGRAM_CHECK(slot.wake == Wake::kStuck);
}

bool Scheduler::wake_if_ready(int rank) {
  RankSlot& slot = *ranks_[static_cast<size_t>(rank)];
  // Only this rank runs and the others are parked, so evaluating their
  // conditions here is safe; it spares a switch per rank that would only
  // park again. Sleepers (no condition) wait for their timer alone.
  if (slot.state != State::kParked || slot.waiting_for == nullptr || !(*slot.waiting_for)()) return false;
  slot.wake = Wake::kReady;
  make_ready(rank);
  return true;
}

void Scheduler::notify(WaitKey key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<Waiter>& list = it->second;
  size_t kept = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const Waiter w = list[i];
    const RankSlot& slot = *ranks_[static_cast<size_t>(w.rank)];
    if (slot.state != State::kParked || slot.park != w.park) continue;  // that parking ended otherwise
    if (wake_if_ready(w.rank)) continue;
    list[kept++] = w;
  }
  list.resize(kept);
  if (list.empty()) waiters_.erase(it);
}

void Scheduler::notify_all() {
  size_t i = 0;
  while (i < parked_.size()) {
    // A woken rank leaves parked_ and the last one takes index i: look at i again.
    if (!wake_if_ready(parked_[i])) ++i;
  }
}

}  // namespace engram::sim
