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
      death_points_(ranks_.size()) {
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
  if (is_dead(rank)) return Visit::kDied;
  if (faults_.dies(fault_site_name(site), rank)) {
    kill(rank, fault_site_name(site));
    return Visit::kDied;
  }
  if (faults_.fire(site, rank)) {
    scheduler_.record(fmt::format("fault {} rank {}", fault_site_name(site), rank));
    return Visit::kFault;
  }
  return Visit::kProceed;
}

bool SimContext::dies_at(std::string_view checkpoint, int rank) {
  if (is_dead(rank)) return true;
  if (!faults_.dies(checkpoint, rank)) return false;
  kill(rank, std::string(checkpoint));
  return true;
}

Status SimContext::dead_status(int rank, std::string_view step) const {
  return Status(ErrorCode::kUnavailable,
                fmt::format("rank {} died at {} (fault plan: rank_death); its process is gone", rank,
                            death_point(rank)),
                {rank, -1, std::string(step)});
}

void SimContext::kill(int rank, std::string point) {
  ENGRAM_CHECK(!is_dead(rank));
  dead_[static_cast<size_t>(rank)] = true;
  death_points_[static_cast<size_t>(rank)] = std::move(point);
  scheduler_.record(fmt::format("death rank {} at {}", rank, death_points_[static_cast<size_t>(rank)]));
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
