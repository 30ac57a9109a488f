#include "backends/cuda/host_row_stager.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "backends/cuda/gpu_buffer.h"

namespace engram::cuda {

Result<std::unique_ptr<HostRowStager>> HostRowStager::create(int gpu, const Options& options) {
  if (options.slots_max <= 0 || options.ids_max <= 0 || options.row_bytes == 0 || options.threads <= 0 ||
      options.chunk_slots <= 0) {
    return invalid_argument(fmt::format("host row stager: slots_max {}, ids_max {}, row_bytes {}, threads {} and "
                                        "chunk_slots {} must all be positive",
                                        options.slots_max, options.ids_max, options.row_bytes, options.threads,
                                        options.chunk_slots));
  }
  std::unique_ptr<HostRowStager> stager(new HostRowStager(gpu, options));
  ENGRAM_RETURN_IF_ERROR(stager->init());
  return stager;
}

Status HostRowStager::init() {
  const int gpu = gpu_;
  auto call = [gpu](cudaError_t e, const char* what) { return cuda_runtime_status(e, what, gpu, "host stager"); };
  ENGRAM_RETURN_IF_ERROR(call(cudaSetDevice(gpu_), "cudaSetDevice"));
  const uint64_t staging_bytes = static_cast<uint64_t>(options_.slots_max) * options_.row_bytes;
  ENGRAM_RETURN_IF_ERROR(call(cudaHostAlloc(reinterpret_cast<void**>(&ids_pinned_),
                                            static_cast<uint64_t>(options_.ids_max) * sizeof(int64_t),
                                            cudaHostAllocDefault),
                              "cudaHostAlloc(ids)"));
  ENGRAM_RETURN_IF_ERROR(call(cudaHostAlloc(reinterpret_cast<void**>(&staging_pinned_), staging_bytes,
                                            cudaHostAllocDefault),
                              "cudaHostAlloc(staging)"));
  ENGRAM_RETURN_IF_ERROR(call(cudaMalloc(&staging_device_, staging_bytes), "cudaMalloc(staging)"));
  ENGRAM_RETURN_IF_ERROR(call(cudaStreamCreateWithFlags(&host_stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  ENGRAM_RETURN_IF_ERROR(call(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  for (cudaEvent_t* e : {&forked_, &host_done_, &copies_done_}) {
    ENGRAM_RETURN_IF_ERROR(call(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate"));
  }
  const int64_t chunks = (options_.slots_max + options_.chunk_slots - 1) / options_.chunk_slots;
  chunk_ready_.resize(static_cast<size_t>(chunks), nullptr);
  for (cudaEvent_t& e : chunk_ready_) {
    ENGRAM_RETURN_IF_ERROR(call(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
  }
  for (int i = 0; i < options_.threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  return Status::ok();
}

HostRowStager::~HostRowStager() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
  // Work still queued on the internal streams reads the buffers freed below.
  if (cudaSetDevice(gpu_) == cudaSuccess) {
    if (host_stream_) cudaStreamSynchronize(host_stream_);
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  }
  for (cudaEvent_t e : chunk_ready_)
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : {forked_, host_done_, copies_done_})
    if (e) cudaEventDestroy(e);
  if (host_stream_) cudaStreamDestroy(host_stream_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (staging_device_) cudaFree(staging_device_);
  if (staging_pinned_) cudaFreeHost(staging_pinned_);
  if (ids_pinned_) cudaFreeHost(ids_pinned_);
}

HostRowStager::Job& HostRowStager::job_for(const HostGatherArgs& a) {
  auto key = std::make_tuple(static_cast<const void*>(a.ids), static_cast<const void*>(a.table), a.tokens,
                             a.head_begin, a.head_count, a.first_row, a.row_count);
  auto it = jobs_.find(key);
  if (it != jobs_.end() && it->second->args.out == a.out && it->second->args.ids_per_token == a.ids_per_token &&
      it->second->args.layout.row_bytes == a.layout.row_bytes) {
    return *it->second;
  }
  auto job = std::make_unique<Job>();
  job->args = a;
  const int64_t slots = a.tokens * a.head_count;
  for (int64_t first = 0; first < slots; first += options_.chunk_slots) {
    job->chunks.push_back(Chunk{this, job.get(), first, std::min(slots, first + options_.chunk_slots)});
  }
  Job& ref = *job;
  jobs_[key] = std::move(job);
  return ref;
}

void CUDART_CB HostRowStager::run_chunk(void* data) {
  const Chunk& chunk = *static_cast<const Chunk*>(data);
  HostRowStager& s = *chunk.stager;
  std::unique_lock<std::mutex> lock(s.mutex_);
  s.current_ = &chunk;
  s.busy_ = s.options_.threads;
  ++s.generation_;
  s.work_ready_.notify_all();
  s.work_done_.wait(lock, [&s] { return s.busy_ == 0; });
}

void HostRowStager::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const Chunk* chunk = nullptr;
    {
      // Blocking, not spinning: spinning workers took the cores the CUDA
      // callback thread and the caller need (15 ms instead of 3.6 ms at
      // 8192 tokens with as many workers as cores).
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      chunk = current_;
    }
    // This worker's share of the chunk's slots.
    const int n = options_.threads;
    const int64_t span = chunk->slot_end - chunk->slot_begin;
    Chunk part = *chunk;
    part.slot_begin = chunk->slot_begin + span * index / n;
    part.slot_end = chunk->slot_begin + span * (index + 1) / n;
    gather(part);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_ == 0) work_done_.notify_all();
  }
}

void HostRowStager::gather(const Chunk& chunk) {
  const HostGatherArgs& a = chunk.job->args;
  const uint64_t row_bytes = a.layout.row_bytes;
  constexpr int kAhead = 8;  // rows prefetched ahead: keeps several DRAM misses in flight per thread
  for (int64_t slot = chunk.slot_begin; slot < chunk.slot_end; ++slot) {
    if (slot + kAhead < chunk.slot_end) {
      const int64_t ahead = slot + kAhead;
      const int64_t token = ahead / a.head_count;
      const int64_t row = ids_pinned_[token * a.ids_per_token + a.head_begin + (ahead - token * a.head_count)] -
                          a.first_row;
      if (row >= 0 && row < a.row_count) {
        const std::byte* p = a.table + static_cast<uint64_t>(row) * row_bytes;
        for (uint64_t line = 0; line < row_bytes + 63; line += 64) __builtin_prefetch(p + line, 0, 0);
      }
    }
    const int64_t token = slot / a.head_count;
    const int64_t row =
        ids_pinned_[token * a.ids_per_token + a.head_begin + (slot - token * a.head_count)] - a.first_row;
    // Rows outside the table or slice are zeroed by the dequantiser, which
    // reads the same ids; nothing to copy.
    if (row < 0 || row >= a.row_count) continue;
    std::memcpy(staging_pinned_ + static_cast<uint64_t>(slot) * row_bytes,
                a.table + static_cast<uint64_t>(row) * row_bytes, row_bytes);
  }
}

Status HostRowStager::enqueue(const HostGatherArgs& a, cudaStream_t stream) {
  if (a.tokens < 0 || a.head_count <= 0 || a.head_begin < 0 || a.head_begin + a.head_count > a.ids_per_token) {
    return invalid_argument(fmt::format("host gather: tokens {} must be >= 0 and heads [{}, {}) inside the {} ids per "
                                        "token", a.tokens, a.head_begin, a.head_begin + a.head_count, a.ids_per_token));
  }
  if (a.tokens == 0) return Status::ok();
  const int64_t slots = a.tokens * a.head_count;
  const int64_t ids = a.tokens * a.ids_per_token;
  if (slots > options_.slots_max || ids > options_.ids_max || a.layout.row_bytes > options_.row_bytes) {
    return invalid_argument(fmt::format("host gather: {} rows of {} B ({} ids) exceed the stager's {} rows of {} B "
                                        "({} ids); size it for the largest lookup (tokens_per_rank_max)",
                                        slots, a.layout.row_bytes, ids, options_.slots_max, options_.row_bytes,
                                        options_.ids_max));
  }
  if (a.ids == nullptr || a.out == nullptr || (a.table == nullptr && a.row_count > 0)) {
    return invalid_argument("host gather: ids, out and table must not be null");
  }
  // The last direct_tokens tokens are read by the kernel, the rest staged.
  const int64_t direct_tokens =
      a.table_device != nullptr ? std::min<int64_t>(a.tokens, static_cast<int64_t>(a.tokens * options_.direct_fraction))
                                : 0;
  HostGatherArgs staged = a;
  staged.tokens = a.tokens - direct_tokens;
  const int gpu = gpu_;
  auto call = [gpu](cudaError_t e, const char* what) { return cuda_runtime_status(e, what, gpu, "host gather"); };
  // Enqueued on `stream` after the fork, so it runs beside the staged part.
  auto launch_direct = [&]() -> Status {
    if (direct_tokens == 0) return Status::ok();
    kernels::HostRowsArgs g;
    g.ids = a.ids + staged.tokens * a.ids_per_token;
    g.tokens = direct_tokens;
    g.ids_per_token = a.ids_per_token;
    g.head_begin = a.head_begin;
    g.head_count = a.head_count;
    g.first_row = a.first_row;
    g.row_count = a.row_count;
    g.layout = a.layout;
    g.out = a.out + static_cast<uint64_t>(staged.tokens) * a.head_count * a.layout.dim;
    return kernels::gather_range(g, a.table_device, stream);
  };
  if (staged.tokens == 0) return launch_direct();
  Job& job = job_for(staged);
  ENGRAM_RETURN_IF_ERROR(call(cudaEventRecord(forked_, stream), "cudaEventRecord"));
  ENGRAM_RETURN_IF_ERROR(call(cudaStreamWaitEvent(host_stream_, forked_, 0), "cudaStreamWaitEvent"));
  ENGRAM_RETURN_IF_ERROR(call(cudaStreamWaitEvent(copy_stream_, forked_, 0), "cudaStreamWaitEvent"));
  ENGRAM_RETURN_IF_ERROR(launch_direct());
  ENGRAM_RETURN_IF_ERROR(call(cudaMemcpyAsync(ids_pinned_, a.ids,
                                              static_cast<uint64_t>(staged.tokens * a.ids_per_token) * sizeof(int64_t),
                                              cudaMemcpyDeviceToHost, host_stream_),
                              "cudaMemcpyAsync(ids)"));
  for (size_t k = 0; k < job.chunks.size(); ++k) {
    const Chunk& chunk = job.chunks[k];
    ENGRAM_RETURN_IF_ERROR(call(cudaLaunchHostFunc(host_stream_, &HostRowStager::run_chunk,
                                                   const_cast<Chunk*>(&chunk)),
                                "cudaLaunchHostFunc"));
    ENGRAM_RETURN_IF_ERROR(call(cudaEventRecord(chunk_ready_[k], host_stream_), "cudaEventRecord"));
    ENGRAM_RETURN_IF_ERROR(call(cudaStreamWaitEvent(copy_stream_, chunk_ready_[k], 0), "cudaStreamWaitEvent"));
    const uint64_t offset = static_cast<uint64_t>(chunk.slot_begin) * a.layout.row_bytes;
    const uint64_t bytes = static_cast<uint64_t>(chunk.slot_end - chunk.slot_begin) * a.layout.row_bytes;
    ENGRAM_RETURN_IF_ERROR(call(cudaMemcpyAsync(static_cast<std::byte*>(staging_device_) + offset,
                                                staging_pinned_ + offset, bytes, cudaMemcpyHostToDevice,
                                                copy_stream_),
                                "cudaMemcpyAsync(rows)"));
  }
  ENGRAM_RETURN_IF_ERROR(call(cudaEventRecord(host_done_, host_stream_), "cudaEventRecord"));
  ENGRAM_RETURN_IF_ERROR(call(cudaEventRecord(copies_done_, copy_stream_), "cudaEventRecord"));
  ENGRAM_RETURN_IF_ERROR(call(cudaStreamWaitEvent(stream, host_done_, 0), "cudaStreamWaitEvent"));
  ENGRAM_RETURN_IF_ERROR(call(cudaStreamWaitEvent(stream, copies_done_, 0), "cudaStreamWaitEvent"));
  kernels::HostRowsArgs d;
  d.ids = a.ids;
  d.tokens = staged.tokens;
  d.ids_per_token = a.ids_per_token;
  d.head_begin = a.head_begin;
  d.head_count = a.head_count;
  d.first_row = a.first_row;
  d.row_count = a.row_count;
  d.layout = a.layout;
  d.out = a.out;
  return kernels::dequant_staged(d, staging_device_, stream);
}

}  // namespace engram::cuda
