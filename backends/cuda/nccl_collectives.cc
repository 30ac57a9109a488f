#include "backends/cuda/nccl_collectives.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#ifdef ENGRAM_HAVE_NCCL
#include <nccl.h>

#include <cstring>

namespace engram::cuda {
namespace {

ErrorCode nccl_error_code(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return ErrorCode::kOk;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return ErrorCode::kInvalidArgument;
    case ncclSystemError:
    case ncclRemoteError:
    case ncclInProgress: return ErrorCode::kUnavailable;
    default: return ErrorCode::kInternal;  // ncclUnhandledCudaError, ncclInternalError
  }
}

Status nccl_status(ncclResult_t result, ncclComm_t comm, const char* call, const char* step, int rank,
                   int device) {
  const char* last = ncclGetLastError(comm);
  return Status(nccl_error_code(result),
                fmt::format("{} failed on GPU {}: {} ({}){}{}", call, device, ncclGetErrorString(result),
                            static_cast<int>(result), last && *last ? ": " : "", last ? last : ""),
                ErrorContext{.rank = rank, .peer = -1, .step = step});
}

Status cuda_rt_status(cudaError_t error, const char* call, const char* step, int device) {
  return Status(error == cudaErrorNoDevice || error == cudaErrorInvalidDevice || error == cudaErrorInsufficientDriver
                    ? ErrorCode::kFailedPrecondition
                    : ErrorCode::kInternal,
                fmt::format("{} failed for GPU {}: {} ({})", call, device, cudaGetErrorName(error),
                            cudaGetErrorString(error)),
                ErrorContext{.step = step});
}

}  // namespace

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(Collectives& bootstrap, int cuda_device) {
  const int rank = bootstrap.rank();
  const int size = bootstrap.size();
  ENGRAM_CHECK(rank >= 0 && rank < size);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) return nccl_status(result, nullptr, "ncclGetUniqueId", "nccl id", rank, cuda_device);
  }
  // Everyone contributes its bytes; only rank 0's are used. An all-gather
  // rather than a broadcast because that is what every Collectives has.
  std::vector<std::byte> all(sizeof(id) * static_cast<size_t>(size));
  ENGRAM_RETURN_IF_ERROR(
      bootstrap.all_gather(std::as_bytes(std::span(&id, 1)), all).with_context(bootstrap.world_rank(), -1, "nccl id"));
  std::memcpy(&id, all.data(), sizeof(id));

  cudaError_t error = cudaSetDevice(cuda_device);
  if (error != cudaSuccess) return cuda_rt_status(error, "cudaSetDevice", "nccl init", cuda_device);
  ncclComm_t comm = nullptr;
  ncclResult_t result = ncclCommInitRank(&comm, size, id, rank);
  if (result != ncclSuccess) return nccl_status(result, nullptr, "ncclCommInitRank", "nccl init", rank, cuda_device);
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, rank, size, cuda_device));
}

Result<std::vector<std::unique_ptr<NcclCommunicator>>> NcclCommunicator::create_local_group(
    std::span<const int> devices) {
  if (devices.empty()) return invalid_argument("create_local_group: devices is empty; list at least one GPU ordinal");
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  std::vector<int> list(devices.begin(), devices.end());
  ncclResult_t result = ncclCommInitAll(comms.data(), static_cast<int>(list.size()), list.data());
  if (result != ncclSuccess) return nccl_status(result, nullptr, "ncclCommInitAll", "nccl init", -1, list[0]);
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (size_t i = 0; i < comms.size(); ++i) {
    out.emplace_back(new NcclCommunicator(comms[i], static_cast<int>(i), static_cast<int>(comms.size()), list[i]));
  }
  return out;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) {
    cudaSetDevice(device_);
    ncclCommDestroy(comm_);
  }
}

Status NcclCommunicator::check(int nccl_result, const char* call, const char* step) {
  auto result = static_cast<ncclResult_t>(nccl_result);
  if (result == ncclSuccess || result == ncclInProgress) return Status::ok();
  return nccl_status(result, comm_, call, step, rank_, device_);
}

Status NcclCommunicator::all_gather_ids(const int64_t* mine, int64_t* all, size_t count, cudaStream_t stream) {
  ENGRAM_CHECK(mine != nullptr && all != nullptr);
  return check(ncclAllGather(mine, all, count, ncclInt64, comm_, stream), "ncclAllGather", "all-gather ids");
}

Status NcclCommunicator::all_gather_bytes(const void* mine, void* all, size_t bytes_per_rank, cudaStream_t stream) {
  ENGRAM_CHECK(mine != nullptr && all != nullptr);
  return check(ncclAllGather(mine, all, bytes_per_rank, ncclUint8, comm_, stream), "ncclAllGather", "all-gather");
}

Status NcclCommunicator::all_to_all_bytes(const void* send, void* receive, size_t bytes_per_rank,
                                          cudaStream_t stream) {
  ENGRAM_CHECK(send != nullptr && receive != nullptr);
  ENGRAM_RETURN_IF_ERROR(check(ncclGroupStart(), "ncclGroupStart", "all-to-all"));
  Status first;
  for (int peer = 0; peer < size_; ++peer) {
    const auto* out = static_cast<const uint8_t*>(send) + static_cast<size_t>(peer) * bytes_per_rank;
    auto* in = static_cast<uint8_t*>(receive) + static_cast<size_t>(peer) * bytes_per_rank;
    if (first.is_ok()) first = check(ncclSend(out, bytes_per_rank, ncclUint8, peer, comm_, stream), "ncclSend", "all-to-all");
    if (first.is_ok()) first = check(ncclRecv(in, bytes_per_rank, ncclUint8, peer, comm_, stream), "ncclRecv", "all-to-all");
  }
  // The group is closed whatever failed inside it.
  Status ended = check(ncclGroupEnd(), "ncclGroupEnd", "all-to-all");
  return first.is_ok() ? ended : first;
}

Status NcclCommunicator::reduce_scatter_sum_bf16(const uint16_t* input, uint16_t* output, size_t count,
                                                 cudaStream_t stream) {
  ENGRAM_CHECK(input != nullptr && output != nullptr);
  return check(ncclReduceScatter(input, output, count, ncclBfloat16, ncclSum, comm_, stream), "ncclReduceScatter",
               "reduce-scatter");
}

Status NcclCommunicator::reduce_scatter_max_bytes(const void* input, void* output, size_t bytes, cudaStream_t stream) {
  ENGRAM_CHECK(input != nullptr && output != nullptr);
  return check(ncclReduceScatter(input, output, bytes, ncclUint8, ncclMax, comm_, stream), "ncclReduceScatter",
               "reduce-scatter (max)");
}

NcclGroup::NcclGroup() {
  ENGRAM_CHECK(ncclGroupStart() == ncclSuccess);
  open_ = true;
}

NcclGroup::~NcclGroup() {
  if (open_) ncclGroupEnd();
}

Status NcclGroup::end() {
  ENGRAM_CHECK(open_);
  open_ = false;
  ncclResult_t result = ncclGroupEnd();
  if (result != ncclSuccess) return nccl_status(result, nullptr, "ncclGroupEnd", "nccl group", -1, -1);
  return Status::ok();
}

}  // namespace engram::cuda
#else  // built without NCCL: every entry point says so

namespace engram::cuda {
namespace {
Status no_nccl() {
  return failed_precondition("engramlab was built without NCCL (nccl.h / libnccl not found at configure time); "
                             "set ENGRAM_NCCL_INCLUDE_DIR and ENGRAM_NCCL_LIBRARY");
}
}  // namespace

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(Collectives&, int) { return no_nccl(); }
Result<std::vector<std::unique_ptr<NcclCommunicator>>> NcclCommunicator::create_local_group(std::span<const int>) {
  return no_nccl();
}
NcclCommunicator::~NcclCommunicator() = default;
Status NcclCommunicator::check(int, const char*, const char*) { return no_nccl(); }
Status NcclCommunicator::all_gather_ids(const int64_t*, int64_t*, size_t, cudaStream_t) { return no_nccl(); }
Status NcclCommunicator::all_gather_bytes(const void*, void*, size_t, cudaStream_t) { return no_nccl(); }
Status NcclCommunicator::all_to_all_bytes(const void*, void*, size_t, cudaStream_t) { return no_nccl(); }
Status NcclCommunicator::reduce_scatter_sum_bf16(const uint16_t*, uint16_t*, size_t, cudaStream_t) { return no_nccl(); }
Status NcclCommunicator::reduce_scatter_max_bytes(const void*, void*, size_t, cudaStream_t) { return no_nccl(); }
NcclGroup::NcclGroup() = default;
NcclGroup::~NcclGroup() = default;
Status NcclGroup::end() { return no_nccl(); }

}  // namespace engram::cuda
#endif
