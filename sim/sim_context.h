// State every emulated backend of one World run shares: the scheduler, the
// hosts and where each rank runs, the ledger, the faults and the coverage
// counters, and who has died. Touched only by the rank holding the
// scheduler's baton, so it needs no locks.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/deployment/deployment.h"
#include "core/base/status.h"
#include "sim/faults.h"
#include "sim/ledger.h"
#include "sim/scheduler.h"

namespace engram::sim {

struct RankPlace {
  int host = -1;  // index into the hosts
  int gpu = -1;   // physical GPU index on that host
};

class SimContext {
 public:
  // `hosts` must be complete (boot ids, GPU memory); checked by the World.
  SimContext(Scheduler& scheduler, std::vector<HostSpec> hosts, std::vector<RankPlace> ranks, FaultPlan plan,
             uint64_t seed);

  Scheduler& scheduler() { return scheduler_; }
  Ledger& ledger() { return ledger_; }
  Faults& faults() { return faults_; }
  CoverageCounters& coverage() { return coverage_; }

  int rank_count() const { return static_cast<int>(ranks_.size()); }
  const std::vector<HostSpec>& hosts() const { return hosts_; }
  const RankPlace& place(int rank) const;
  const HostSpec& host_of(int rank) const { return hosts_[static_cast<size_t>(place(rank).host)]; }
  // Host identity is hostname + boot id: two containers of one machine share it.
  bool same_host(int a, int b) const;
  std::string where(int rank) const;  // "rank 3 (gpu 1 of host-a)"

  enum class Visit { kProceed, kFault, kDied };
  // `rank` reaches step site `site`, which is also a checkpoint: proceed
  // (perhaps after a slow stall), fail as injected, or be gone (died here,
  // or hung here and was reaped).
  Visit visit(FaultSite site, int rank);
  // A checkpoint that is no step site (collective entry): true when the
  // rank is gone.
  bool gone_at(std::string_view checkpoint, int rank);

  bool is_dead(int rank) const { return dead_[static_cast<size_t>(rank)]; }
  // "died at import (fault plan: rank_death)", "hung at collective (...)".
  const std::string& death_cause(int rank) const { return death_causes_[static_cast<size_t>(rank)]; }
  // The fault site that ended a gone rank: "hang" when it hung and was reaped, else "rank_death".
  const char* death_site_name(int rank) const;
  // What any call from a dead rank returns.
  Status dead_status(int rank, std::string_view step) const;
  // The World releases what a dying process held, as the OS would.
  void set_death_handler(std::function<void(int rank)> handler) { on_death_ = std::move(handler); }

  // How much slower than the step model the rank's links and GPU run now
  // (a slow fault with factors struck it; 1 = as modelled).
  const SlowFactors& slow_factors(int rank) const { return slow_factors_[static_cast<size_t>(rank)]; }

  uint64_t next_id() { return ++next_id_; }
  // Simulated time slow faults stalled ranks, summed over ranks.
  SimTimeUs stalled_us() const { return stalled_us_; }

 private:
  // A process fault striking at a checkpoint: true when the rank is gone.
  bool strike(std::string_view checkpoint, int rank);
  // A hung rank that is reaped ends deadline_exceeded; a death, unavailable.
  void kill(int rank, std::string cause, ErrorCode code = ErrorCode::kUnavailable);

  Scheduler& scheduler_;
  std::vector<HostSpec> hosts_;
  std::vector<RankPlace> ranks_;
  Ledger ledger_;
  Faults faults_;
  CoverageCounters coverage_;
  std::vector<bool> dead_;
  std::vector<std::string> death_causes_;
  std::vector<ErrorCode> death_codes_;
  std::vector<SlowFactors> slow_factors_;
  std::function<void(int)> on_death_;
  uint64_t next_id_ = 0;
  SimTimeUs stalled_us_ = 0;
};

// CUDA driver errors as the core sees them: the status code a caller can
// branch on, and the driver's own name in the message.
Status cuda_error(const char* cuda_code, std::string message);

}  // namespace engram::sim
