// The emulator's clock and its ranks as user-space tasks: deadlines in
// simulated time (a hung rank makes its peers fail with deadline_exceeded
// naming it, with no wall time passing), slow ranks below and above the
// timeout, fd receives that time out, deadlock detection as the last resort,
// the liveness bound, the same trace under CPU load, and a large world in a
// process limited to 64 tasks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <system_error>
#include <thread>

#include "cgroup_support.h"
#include "core/base/units.h"
#include "core/exchange/handle_exchange.h"
#include "sim/scheduler.h"
#include "sim/seed.h"
#include "sim/world.h"

namespace engram::sim {
namespace {

using ::testing::HasSubstr;

WorldSpec four_ranks() {
  WorldSpec spec;
  spec.hosts = plain_hosts("node-", 2, 2, "H200");
  spec.timeouts.collective_us = 30'000'000;
  return spec;
}

Status three_barriers(RankBackend& b) {
  for (int i = 0; i < 3; ++i) ENGRAM_RETURN_IF_ERROR(b.world->barrier());
  return Status::ok();
}

TEST(SimClock, AHungRankMakesItsPeersTimeOutNamingItInSimulatedTime) {
  WorldSpec spec = four_ranks();
  spec.faults.plan(FaultSite::kHang, 2, /*occurrence=*/2, "collective");
  const auto wall_start = std::chrono::steady_clock::now();
  auto run = run_world(spec, three_barriers);
  const auto wall = std::chrono::steady_clock::now() - wall_start;
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  for (int r : {0, 1, 3}) {
    const Status& s = run->statuses[static_cast<size_t>(r)];
    EXPECT_EQ(s.code(), ErrorCode::kDeadlineExceeded) << s.to_string();
    EXPECT_EQ(s.context().peer, 2) << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr("rank 2 did not arrive within 30 s"));
  }
  EXPECT_THAT(run->statuses[2].message(), HasSubstr("hung at collective"));
  EXPECT_EQ(run->faults.fired(FaultSite::kHang), 1u);
  // The first barrier passed at time 0; the second timed out 30 s later.
  EXPECT_EQ(run->end_time_us, 30'000'000u);
  EXPECT_TRUE(run->live()) << run->liveness_text();
  EXPECT_TRUE(run->leaks.empty());
  EXPECT_LT(wall, std::chrono::seconds(5));  // simulated time, not wall time (a generous bound)
}

TEST(SimClock, ASlowRankBelowTheTimeoutOnlyDelays) {
  WorldSpec spec = four_ranks();
  spec.faults.plan(FaultSite::kSlow, 1, 1, "collective", /*delay_us=*/20'000'000);
  auto run = run_world(spec, three_barriers);
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_EQ(run->end_time_us, 20'000'000u);
  EXPECT_EQ(run->faults.fired(FaultSite::kSlow), 1u);
  EXPECT_TRUE(run->live());
}

TEST(SimClock, ASlowRankPastTheTimeoutFailsItsPeersAndTheGroupStaysAborted) {
  WorldSpec spec = four_ranks();
  spec.faults.plan(FaultSite::kSlow, 3, 1, "collective", /*delay_us=*/45'000'000);
  auto run = run_world(spec, three_barriers);
  ASSERT_TRUE(run.is_ok());
  for (int r : {0, 1, 2}) {
    EXPECT_EQ(run->statuses[static_cast<size_t>(r)].code(), ErrorCode::kDeadlineExceeded);
    EXPECT_EQ(run->statuses[static_cast<size_t>(r)].context().peer, 3);
  }
  // The late rank finds the communicator its peers aborted.
  EXPECT_EQ(run->statuses[3].code(), ErrorCode::kDeadlineExceeded) << run->statuses[3].to_string();
  EXPECT_THAT(run->statuses[3].message(), HasSubstr("aborted"));
  EXPECT_EQ(run->end_time_us, 45'000'000u);
  EXPECT_TRUE(run->live());
}

TEST(SimClock, AnFdThatNeverComesTimesOut) {
  WorldSpec spec;
  spec.hosts = plain_hosts("node-", 1, 2, "H200");
  spec.timeouts.fd_receive_us = 7'000'000;
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    if (b.world_rank == 0) return b.fds->recv_fd(1).status();
    return Status::ok();  // rank 1 never sends, and stays up
  });
  ASSERT_TRUE(run.is_ok());
  // Rank 1 exits, which rank 0 learns at once (its socket closes).
  EXPECT_EQ(run->statuses[0].code(), ErrorCode::kUnavailable);

  auto hung = run_world(spec, [](RankBackend& b) -> Status {
    if (b.world_rank == 0) return b.fds->recv_fd(1).status();
    return b.world->barrier();  // never completes: rank 0 does not join
  });
  ASSERT_TRUE(hung.is_ok());
  EXPECT_EQ(hung->statuses[0].code(), ErrorCode::kDeadlineExceeded) << hung->statuses[0].to_string();
  EXPECT_THAT(hung->statuses[0].message(), HasSubstr("no fd from rank 1 within 7 s"));
  EXPECT_EQ(hung->statuses[1].code(), ErrorCode::kDeadlineExceeded);
}

TEST(SimClock, AWaitWithoutADeadlineThatNothingEndsIsADeadlock) {
  Scheduler scheduler(5);
  std::vector<Scheduler::Wake> wakes(2);
  scheduler.run(2, [&](int rank) { wakes[static_cast<size_t>(rank)] = scheduler.wait_until([] { return false; }); });
  EXPECT_EQ(wakes[0], Scheduler::Wake::kStuck);
  EXPECT_EQ(wakes[1], Scheduler::Wake::kStuck);
  EXPECT_EQ(scheduler.deadlock_count(), 2u);
}

TEST(SimClock, SleepersWakeInDeadlineOrder) {
  Scheduler scheduler(9);
  std::vector<int> order;
  scheduler.run(3, [&](int rank) {
    scheduler.sleep_for(static_cast<SimTimeUs>(3 - rank) * 1000);
    order.push_back(rank);
  });
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(scheduler.now_us(), 3000u);
}

// The step clock (sim/sim_step_clock.h): each rank's lookup step takes its
// priced time on the clock, a collective in the step ends with the slowest
// member (its peers wait the difference), and a slow fault's factors reach
// the pricer from the checkpoint where it strikes.
TEST(SimClock, LookupStepsTakeTheirPricedTimeAndAStragglerKeepsItsPeersWaiting) {
  WorldSpec spec = four_ranks();
  spec.faults.plan(FaultSite::kSlow, 3, 1, "collective", 0, SlowFactors{2.5, 1.0});
  spec.step_pricer = [](int rank, int64_t tokens, int64_t slot, const SlowFactors& slow) {
    EXPECT_EQ(slot, 16);
    return (rank == 1 ? 10.25 : 4.0) * static_cast<double>(tokens) / 8 * slow.link;
  };
  auto run = run_world(spec, [](RankBackend& b) -> Status {
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());  // the slow fault strikes rank 3 here
    for (int step = 0; step < 2; ++step) {
      b.step_clock->begin_step(8, 16);
      ENGRAM_RETURN_IF_ERROR(b.world->barrier());
      b.step_clock->end_step();
    }
    return Status::ok();
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_TRUE(run->all_ok()) << run->summary();
  ASSERT_EQ(run->step_times.size(), 4u);
  EXPECT_EQ(run->step_times[0].step_us, (std::vector<double>{4.0, 4.0}));
  EXPECT_EQ(run->step_times[1].step_us, (std::vector<double>{10.25, 10.25}));
  EXPECT_EQ(run->step_times[3].step_us, (std::vector<double>{10.0, 10.0}));  // its links 2.5x slower
  // Whole microseconds on the clock, rounded over the sum: 10 then 11 for
  // rank 1 (10.25, 20.5); every step ends with it.
  EXPECT_EQ(run->step_times[1].advanced_us, 21u);
  EXPECT_EQ(run->step_times[0].waited_us, (std::vector<SimTimeUs>{6, 7}));
  EXPECT_EQ(run->step_times[3].waited_us, (std::vector<SimTimeUs>{0, 1}));
  EXPECT_EQ(run->step_times[1].waited_us, (std::vector<SimTimeUs>{0, 0}));
  EXPECT_EQ(run->end_time_us, 21u);
  EXPECT_TRUE(run->live()) << run->liveness_text();

  // No pricer, no clock: the backends carry none.
  WorldSpec plain = four_ranks();
  auto unpriced = run_world(plain, [](RankBackend& b) -> Status {
    return b.step_clock == nullptr ? Status::ok() : internal_error("a step clock without a pricer");
  });
  ASSERT_TRUE(unpriced.is_ok());
  EXPECT_TRUE(unpriced->all_ok()) << unpriced->summary();
  EXPECT_TRUE(unpriced->step_times.empty());
}

// Racks of ranks through the handle exchange, one group per NVLink domain
// (what the scale benchmark runs).
Status exchange_body(RankBackend& b) {
  const int color = static_cast<int>(fnv1a64(b.probe->facts().nvlink_domain) & 0x7fffffff);
  ENGRAM_ASSIGN_OR_RETURN(auto rack, b.world->split(color, b.world_rank));
  ENGRAM_ASSIGN_OR_RETURN(SharedMapping m, exchange_shareable_handles(b, *rack, 64 * kMiB));
  return m.teardown();
}

TEST(SimClock, TheSameTraceWithBothCoresBusy) {
  WorldSpec spec;
  spec.hosts = gb300_nvl72_racks(1);
  spec.seed = 77;
  auto idle = run_world(spec, exchange_body);
  ASSERT_TRUE(idle.is_ok());
  ASSERT_TRUE(idle->all_ok()) << idle->summary();
  // Load every core (as another build would), then run the same seed again.
  std::atomic<bool> stop{false};
  std::vector<std::thread> burners;
  const unsigned cores = std::max(2u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < cores; ++i)
    burners.emplace_back([&stop] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  auto loaded = run_world(spec, exchange_body);
  stop = true;
  for (auto& t : burners) t.join();
  ASSERT_TRUE(loaded.is_ok());
  EXPECT_EQ(loaded->trace_hash, idle->trace_hash);
  EXPECT_EQ(loaded->scheduler_switches, idle->scheduler_switches);
}

TEST(SimClock, AThousandRanksRunUnderAPidsLimitOf64) {
  std::string why;
  auto cgroup = testing::TestCgroup::create("pids", why);
  if (!cgroup) GTEST_SKIP() << "cannot make a pids cgroup here: " << why;
  ASSERT_TRUE(cgroup->set_limit("64"));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!cgroup->add(::getpid())) ::_exit(3);
    {
      // The limit holds: 100 threads cannot start here (the test could fail).
      std::vector<std::thread> threads;
      std::atomic<bool> release{false};
      try {
        for (int i = 0; i < 100; ++i)
          threads.emplace_back([&release] {
            while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          });
      } catch (const std::system_error&) {
      }
      release = true;
      const size_t started = threads.size();
      for (auto& t : threads) t.join();
      if (started == 100) ::_exit(4);
    }
    // A thread per rank would fail at the 64th; fibers need none.
    WorldSpec spec;
    spec.hosts = gb300_nvl72_racks(16);
    auto run = run_world(spec, exchange_body);
    ::_exit(run.is_ok() && run->all_ok() && run->statuses.size() == 1152 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_NE(WEXITSTATUS(status), 3) << "could not join " << cgroup->dir();
  if (WEXITSTATUS(status) == 4) GTEST_SKIP() << cgroup->dir() << " does not enforce pids.max here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace engram::sim
