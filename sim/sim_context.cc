#include "sim/sim_context.h"

#include <fmt/format.h>

#include <cstring>

namespace engram::sim {

SimContext::SimContext(Scheduler& scheduler, std::vector<HostSpec> hosts, std::vector<RankPlace> ranks,
                       FaultPlan plan, uint64_t seed)
    : scheduler_(scheduler),
      hosts_(std::move(hosts)),
      ranks_(std::move(ranks)),
      faults_(std::move(plan), seed, static_cast<int>(ranks_.size())),
      dead_(ranks_.size(), false),
      death_causes_(ranks_.size()),
      death_codes_(ranks_.size(), ErrorCode::kUnavailable),
      slow_factors_(ranks_.size()) {
  for (const auto& p : ranks_) {
    ENGRAM_CHECK(p.host >= 0 && p.host < static_cast<int>(hosts_.size()));
    ENGRAM_CHECK(p.gpu >= 0 && p.gpu < hosts_[static_cast<size_t>(p.host)].gpu_count);
  }
}

const RankPlace& SimContext::place(int rank) const {
  ENGRAM_CHECK(rank >= 0 && rank < rank_count());
  return ranks_[static_cast<size_t>(rank)];
}

bool SimContext::same_host(int a, int b) const {
  const HostSpec& x = host_of(a);
  const HostSpec& y = host_of(b);
  return x.name == y.name && x.boot_id == y.boot_id;
}

std::string SimContext::where(int rank) const {
  return fmt::format("rank {} (gpu {} of {})", rank, place(rank).gpu, host_of(rank).name);
}

SimContext::Visit SimContext::visit(FaultSite site, int rank) {
  ENGRAM_CHECK(!is_process_fault(site));
  if (strike(fault_site_name(site), rank)) return Visit::kDied;
  if (faults_.fire(site, rank)) {
    ENGRAM_TRACE(scheduler_, "fault {} rank {}", fault_site_name(site), rank);
    return Visit::kFault;
  }
  return Visit::kProceed;
}

bool SimContext::gone_at(std::string_view checkpoint, int rank) { return strike(checkpoint, rank); }

bool SimContext::strike(std::string_view checkpoint, int rank) {
  if (is_dead(rank)) return true;
  const std::optional<CheckpointFault> fault = faults_.at_checkpoint(checkpoint, rank);
  if (!fault) return false;
  switch (fault->site) {
    case FaultSite::kRankDeath:
      kill(rank, fmt::format("died at {} (fault plan: rank_death)", checkpoint));
      return true;
    case FaultSite::kHang:
      // Its peers cannot tell: they wait until their deadlines pass. The
      // rank comes back only when everyone else has ended, to be reaped.
      ENGRAM_TRACE(scheduler_, "hang rank {} at {}", rank, checkpoint);
      scheduler_.hang();
      kill(rank, fmt::format("hung at {} (fault plan: hang) and was killed once its peers had ended", checkpoint),
           ErrorCode::kDeadlineExceeded);
      return true;
    case FaultSite::kSlow:
      if (fault->slower.any()) {
        // From here on its lookup steps price its links / GPU slower (sim/sim_step_clock.h).
        ENGRAM_TRACE(scheduler_, "slow rank {} at {} links x{} gpu x{}", rank, checkpoint, fault->slower.link,
                     fault->slower.gpu);
        slow_factors_[static_cast<size_t>(rank)] = fault->slower;
      }
      if (fault->delay_us == 0 && fault->slower.any()) return false;  // slower, no stall
      ENGRAM_TRACE(scheduler_, "slow rank {} at {} for {} us", rank, checkpoint, fault->delay_us);
      stalled_us_ += fault->delay_us;
      scheduler_.sleep_for(fault->delay_us);
      return is_dead(rank);
    default:
      ENGRAM_CHECK(false && "a step site is no process fault");
      return false;
  }
}

Status SimContext::dead_status(int rank, std::string_view step) const {
  return Status(death_codes_[static_cast<size_t>(rank)],
                fmt::format("rank {} {}; its process is gone", rank, death_cause(rank)), {rank, -1, std::string(step)});
}

const char* SimContext::death_site_name(int rank) const {
  return fault_site_name(death_codes_[static_cast<size_t>(rank)] == ErrorCode::kDeadlineExceeded ? FaultSite::kHang
                                                                                                : FaultSite::kRankDeath);
}

void SimContext::kill(int rank, std::string cause, ErrorCode code) {
  ENGRAM_CHECK(!is_dead(rank));
  dead_[static_cast<size_t>(rank)] = true;
  death_codes_[static_cast<size_t>(rank)] = code;
  death_causes_[static_cast<size_t>(rank)] = std::move(cause);
  ENGRAM_TRACE(scheduler_, "death rank {}: {}", rank, death_causes_[static_cast<size_t>(rank)]);
  if (on_death_) on_death_(rank);
}

Status cuda_error(const char* cuda_code, std::string message) {
  ErrorCode code = ErrorCode::kInternal;
  if (std::strcmp(cuda_code, "CUDA_ERROR_NOT_PERMITTED") == 0) code = ErrorCode::kPermissionDenied;
  else if (std::strcmp(cuda_code, "CUDA_ERROR_OUT_OF_MEMORY") == 0) code = ErrorCode::kResourceExhausted;
  else if (std::strcmp(cuda_code, "CUDA_ERROR_INVALID_VALUE") == 0) code = ErrorCode::kInvalidArgument;
  else if (std::strcmp(cuda_code, "CUDA_ERROR_INVALID_HANDLE") == 0) code = ErrorCode::kInvalidArgument;
  else if (std::strcmp(cuda_code, "CUDA_ERROR_INVALID_DEVICE") == 0) code = ErrorCode::kFailedPrecondition;
  else if (std::strcmp(cuda_code, "CUDA_ERROR_NOT_SUPPORTED") == 0) code = ErrorCode::kFailedPrecondition;
  else if (std::strcmp(cuda_code, "CUDA_ERROR_ILLEGAL_ADDRESS") == 0) code = ErrorCode::kFailedPrecondition;
  return Status(code, fmt::format("{}: {}", cuda_code, message));
}

}  // namespace engram::sim
