// Device-memory collectives over NCCL for the collective lookup path: an
// all-gather of int64 row ids and a bf16 sum reduce-scatter, enqueued on a
// stream (no host sync, so CUDA-graph capturable). The communicator's
// ncclUniqueId travels through any core Collectives (the bootstrap).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/backend/collectives.h"
#include "core/base/status.h"

struct ncclComm;

namespace engram::cuda {

class NcclCommunicator {
 public:
  // One rank per process (or thread): rank 0 draws the unique id, every rank
  // all-gathers it through `bootstrap`, then joins on GPU `cuda_device`.
  // Blocks until every rank of `bootstrap` has called it.
  static Result<std::unique_ptr<NcclCommunicator>> create(Collectives& bootstrap, int cuda_device);
  // All listed GPUs from one process and thread (ncclCommInitAll); rank i
  // runs on devices[i]. Enqueue on several of them inside a NcclGroup.
  static Result<std::vector<std::unique_ptr<NcclCommunicator>>> create_local_group(std::span<const int> devices);

  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }

  // `all` receives size() * count ids in rank order. Device pointers.
  Status all_gather_ids(const int64_t* mine, int64_t* all, size_t count, cudaStream_t stream);
  // Any bytes: `all` receives size() * bytes_per_rank bytes in rank order.
  Status all_gather_bytes(const void* mine, void* all, size_t bytes_per_rank, cudaStream_t stream);
  // Chunk j of `send` goes to rank j's chunk rank() of `receive` (grouped
  // sends and receives: NCCL has no all-to-all call of its own).
  Status all_to_all_bytes(const void* send, void* receive, size_t bytes_per_rank, cudaStream_t stream);
  // `input` holds size() chunks of `count` bf16 values; this rank receives
  // the sum of chunk rank() into `output`.
  Status reduce_scatter_sum_bf16(const uint16_t* input, uint16_t* output, size_t count, cudaStream_t stream);
  // `input` holds size() chunks of `bytes` bytes; this rank receives the
  // byte-wise maximum of chunk rank() (ncclMax over ncclUint8).
  Status reduce_scatter_max_bytes(const void* input, void* output, size_t bytes, cudaStream_t stream);

 private:
  NcclCommunicator(ncclComm* comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  Status check(int nccl_result, const char* call, const char* step);

  ncclComm* comm_;
  int rank_;
  int size_;
  int device_;
};

// ncclGroupStart/End around enqueues on several communicators from one thread.
class NcclGroup {
 public:
  NcclGroup();
  ~NcclGroup();  // ends the group if end() was not called
  Status end();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  bool open_ = false;
};

}  // namespace engram::cuda
