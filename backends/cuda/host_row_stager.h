// A GPU lookup of a host table at large token counts: the CPU gathers the
// rows and the copy engine moves them, instead of the GPU reading each row
// over PCIe.
//
// Why: a kernel reading random 264-byte rows of registered host memory is
// bound by address translation of the GPU's host accesses, not by PCIe. On
// the lent 2 x H200 (a VM whose IOMMU translates every DMA) a 64 GiB table
// gives 17 GB/s at 256 tokens and 7.5 GB/s at 8192 with fresh ids, whatever
// the page size (4 KiB tmpfs, huge-page tmpfs, cudaHostAlloc, a 2 MiB VMM
// host allocation) or the kernel's shape, against 55 GB/s for a pinned copy
// (docs/perf_notes.md, benchmarks/host_read_probe.cu). A sequential stream of
// the same memory runs at 51 GB/s. So: copy the ids to pinned memory, let a
// pool of CPU threads gather the rows into pinned staging, chunk by chunk,
// copy each chunk to the device as soon as it is gathered (the copy of chunk
// k overlaps the gathering of chunk k + 1), then dequantise on the device.
//
// Everything is enqueued on the caller's stream (forked to two internal
// streams and joined back), with cudaLaunchHostFunc for the CPU steps, so a
// lookup made of it can be captured in a CUDA graph and replayed. No
// allocation, host sync or device allocation happens in enqueue(): buffers,
// streams, events and threads are made by create().
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "core/base/status.h"
#include "kernels/gather_kernels.h"

namespace engram::cuda {

struct HostGatherArgs {
  const int64_t* ids = nullptr;    // device: [tokens x ids_per_token]
  int64_t tokens = 0;
  int ids_per_token = 0;
  int head_begin = 0;              // head window [head_begin, head_begin + head_count)
  int head_count = 0;
  const std::byte* table = nullptr;  // CPU address of rows [first_row, first_row + row_count)
  const void* table_device = nullptr;  // the same rows' device address (registered), or null
  int64_t first_row = 0;
  int64_t row_count = 0;
  kernels::RowLayout layout;
  uint16_t* out = nullptr;         // device: [tokens x head_count x dim] bf16
};

class HostRowStager {
 public:
  struct Options {
    int64_t slots_max = 0;          // tokens x head_count of the largest lookup
    int64_t ids_max = 0;            // tokens x ids_per_token of the largest lookup
    uint64_t row_bytes = 0;         // the widest row
    int threads = 8;                // CPU gatherers
    int64_t chunk_slots = 16384;    // rows per copy
    // The share of tokens the kernel reads straight from host memory while
    // the CPU gathers the rest: the two go through different address
    // translation (the GPU's through the IOMMU, the CPU's through its own
    // page tables), so their rates add. Needs table_device.
    double direct_fraction = 0.0;
  };
  static Result<std::unique_ptr<HostRowStager>> create(int gpu, const Options& options);
  ~HostRowStager();
  HostRowStager(const HostRowStager&) = delete;
  HostRowStager& operator=(const HostRowStager&) = delete;

  // Enqueues the gather on `stream` (the current device must be `gpu`).
  Status enqueue(const HostGatherArgs& args, cudaStream_t stream);

  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  struct Job;
  struct Chunk {
    HostRowStager* stager = nullptr;
    const Job* job = nullptr;
    int64_t slot_begin = 0;
    int64_t slot_end = 0;
  };
  struct Job {
    HostGatherArgs args;
    std::vector<Chunk> chunks;
  };
  HostRowStager(int gpu, const Options& options) : gpu_(gpu), options_(options) {}
  Status init();
  Job& job_for(const HostGatherArgs& args);
  static void CUDART_CB run_chunk(void* chunk);
  void gather(const Chunk& chunk);
  void worker_loop(int index);  // gathers its share (index of threads) of each chunk

  int gpu_;
  Options options_;
  int64_t* ids_pinned_ = nullptr;
  std::byte* staging_pinned_ = nullptr;
  void* staging_device_ = nullptr;
  cudaStream_t host_stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t forked_ = nullptr;
  cudaEvent_t host_done_ = nullptr;
  cudaEvent_t copies_done_ = nullptr;
  std::vector<cudaEvent_t> chunk_ready_;

  // Jobs live as long as the stager: a captured graph keeps pointing at the
  // host-function data of the lookups it captured. One per distinct shape.
  std::map<std::tuple<const void*, const void*, int64_t, int, int, int64_t, int64_t>, std::unique_ptr<Job>> jobs_;

  // The worker pool: run_chunk hands a chunk to every worker and waits.
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const Chunk* current_ = nullptr;
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool stopping_ = false;
};

}  // namespace engram::cuda
