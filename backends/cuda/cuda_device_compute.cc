#include "backends/cuda/cuda_device_compute.h"

#include "backends/cuda/graph_timing.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <thread>

#include "backends/cuda/gpu_buffer.h"
#include "backends/cuda/nccl_collectives.h"
#include "core/model/hashing.h"
#include "kernels/gather_kernels.h"
#include "kernels/request_hash.h"
#include "kernels/table_fill_kernel.h"

namespace engram::cuda {
namespace {

cudaStream_t stream_of(StreamRef stream) { return reinterpret_cast<cudaStream_t>(stream.handle); }
void* ptr(DevicePtr address) { return reinterpret_cast<void*>(address); }

kernels::RowLayout kernel_layout(const DeviceRowLayout& l) {
  kernels::RowLayout out;
  out.format = l.format;
  out.dim = l.dim;
  out.row_bytes = l.row_bytes;
  out.scale_byte_rule = l.scale_byte_rule;
  out.minus_zero = l.minus_zero;
  return out;
}

kernels::RequestHashTable hash_table(const DeviceRequestState& s) {
  const TableHasher& h = *s.hasher;
  kernels::RequestHashTable t;
  t.heads = static_cast<const DeviceHashHead*>(ptr(s.heads));
  t.head_count = h.head_count();
  t.max_order = h.max_order();
  for (int k = 0; k < h.max_order() && k < kMaxHashOrder; ++k) t.multipliers[k] = h.multipliers()[static_cast<size_t>(k)];
  t.pad_id = h.pad_id();
  t.compressed_vocab_size = h.compressed_vocab_size();
  t.dead_token_rule = h.dead_token_rule();
  t.slot_count = s.slot_count;
  t.histories = static_cast<int64_t*>(ptr(s.histories));
  t.verify_tokens_max = s.verify_tokens_max;
  t.pending = static_cast<int64_t*>(ptr(s.pending));
  t.pending_counts = static_cast<int64_t*>(ptr(s.pending_counts));
  t.error = static_cast<uint64_t*>(ptr(s.error));
  return t;
}

class NcclDeviceCollectives final : public DeviceCollectives {
 public:
  explicit NcclDeviceCollectives(std::unique_ptr<NcclCommunicator> comm) : comm_(std::move(comm)) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  Status all_gather(DevicePtr mine, DevicePtr all, uint64_t bytes_per_rank, StreamRef stream) override {
    return comm_->all_gather_bytes(ptr(mine), ptr(all), bytes_per_rank, stream_of(stream));
  }
  Status reduce_scatter_sum_bf16(DevicePtr input, DevicePtr output, uint64_t count, StreamRef stream) override {
    return comm_->reduce_scatter_sum_bf16(static_cast<const uint16_t*>(ptr(input)), static_cast<uint16_t*>(ptr(output)),
                                          count, stream_of(stream));
  }
  Status reduce_scatter_max_bytes(DevicePtr input, DevicePtr output, uint64_t bytes, StreamRef stream) override {
    return comm_->reduce_scatter_max_bytes(ptr(input), ptr(output), bytes, stream_of(stream));
  }
  Status all_to_all(DevicePtr send, DevicePtr receive, uint64_t bytes_per_rank, StreamRef stream) override {
    return comm_->all_to_all_bytes(ptr(send), ptr(receive), bytes_per_rank, stream_of(stream));
  }

 private:
  std::unique_ptr<NcclCommunicator> comm_;
};

}  // namespace

CudaDeviceCompute::CudaDeviceCompute(int ordinal, CudaComputeOptions options)
    : ordinal_(ordinal), options_(options) {}

CudaDeviceCompute::~CudaDeviceCompute() {
  if (cudaSetDevice(ordinal_) != cudaSuccess) return;
  cudaDeviceSynchronize();
  stager_.reset();
  for (const auto& [address, host] : registrations_) cudaHostUnregister(const_cast<std::byte*>(host.data()));
  for (DevicePtr address : allocations_) cudaFree(ptr(address));
}

Status CudaDeviceCompute::make_current(const char* step) {
  return cuda_runtime_status(cudaSetDevice(ordinal_), "cudaSetDevice", ordinal_, step);
}

Status CudaDeviceCompute::launch_error(const char* call, const char* step) {
  return cuda_runtime_status(cudaGetLastError(), call, ordinal_, step);
}

Result<DevicePtr> CudaDeviceCompute::allocate(uint64_t bytes) {
  ENGRAM_RETURN_IF_ERROR(make_current("allocate"));
  void* p = nullptr;
  // At least 16 bytes, so an empty buffer is still a distinct valid address.
  ENGRAM_RETURN_IF_ERROR(cuda_runtime_status(cudaMalloc(&p, std::max<uint64_t>(bytes, 16)),
                                             fmt::format("cudaMalloc({} B)", bytes), ordinal_, "allocate"));
  allocations_.insert(reinterpret_cast<DevicePtr>(p));
  return reinterpret_cast<DevicePtr>(p);
}

Status CudaDeviceCompute::free(DevicePtr address) {
  if (allocations_.erase(address) == 0) {
    return invalid_argument(fmt::format("free: {:#x} is not an allocation of this device compute", address));
  }
  ENGRAM_RETURN_IF_ERROR(make_current("free"));
  return cuda_runtime_status(cudaFree(ptr(address)), "cudaFree", ordinal_, "free");
}

Status CudaDeviceCompute::prepare_lookups(int64_t ids_max, uint64_t row_bytes_max, bool host_tables) {
  if (ids_max <= 0 || row_bytes_max == 0) {
    return invalid_argument(fmt::format("prepare_lookups: ids_max {} and row_bytes_max {} must be positive", ids_max,
                                        row_bytes_max));
  }
  if (!host_tables || ids_max < options_.staged_rows_min) return Status::ok();  // the kernel reads host rows itself
  ENGRAM_RETURN_IF_ERROR(make_current("prepare lookups"));
  HostRowStager::Options o;
  o.slots_max = ids_max;
  o.ids_max = ids_max;
  o.row_bytes = row_bytes_max;
  o.threads = options_.stager_threads;
  o.direct_fraction = options_.direct_fraction;
  auto stager = HostRowStager::create(ordinal_, o);
  if (!stager.is_ok()) return std::move(stager).take_status();
  stager_ = std::move(stager).value();
  return Status::ok();
}

Result<DevicePtr> CudaDeviceCompute::register_host(std::span<const std::byte> host) {
  if (host.empty()) return invalid_argument("register_host: the host range is empty");
  ENGRAM_RETURN_IF_ERROR(make_current("register host"));
  int read_only = 0;
  cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, ordinal_);
  // Read-only where the driver allows it: mappings other ranks share are
  // mapped PROT_READ, and the device never writes a table.
  unsigned flags = cudaHostRegisterMapped | cudaHostRegisterPortable | (read_only ? cudaHostRegisterReadOnly : 0u);
  void* base = const_cast<std::byte*>(host.data());
  cudaError_t error = cudaHostRegister(base, host.size(), flags);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return Status(error == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kFailedPrecondition,
                  fmt::format("cudaHostRegister of {} B of host table on GPU {} failed: {} ({}); the table cannot be "
                              "pinned for the GPU (locked-memory limit, ulimit -l, or the container's memlock)",
                              host.size(), ordinal_, cudaGetErrorName(error), cudaGetErrorString(error)),
                  ErrorContext{-1, -1, "register host"});
  }
  void* device = nullptr;
  error = cudaHostGetDevicePointer(&device, base, 0);
  if (error != cudaSuccess) {
    cudaHostUnregister(base);
    return cuda_runtime_status(error, "cudaHostGetDevicePointer", ordinal_, "register host");
  }
  registrations_.emplace(reinterpret_cast<DevicePtr>(device), host);
  return reinterpret_cast<DevicePtr>(device);
}

Status CudaDeviceCompute::unregister_host(std::span<const std::byte> host) {
  for (auto it = registrations_.begin(); it != registrations_.end(); ++it) {
    if (it->second.data() != host.data()) continue;
    registrations_.erase(it);
    ENGRAM_RETURN_IF_ERROR(make_current("unregister host"));
    return cuda_runtime_status(cudaHostUnregister(const_cast<std::byte*>(host.data())), "cudaHostUnregister",
                               ordinal_, "unregister host");
  }
  return invalid_argument("unregister_host: that host range was not registered by this device compute");
}

Status CudaDeviceCompute::copy_to_device(DevicePtr dst, std::span<const std::byte> src) {
  ENGRAM_RETURN_IF_ERROR(make_current("copy to device"));
  return cuda_runtime_status(cudaMemcpy(ptr(dst), src.data(), src.size(), cudaMemcpyHostToDevice), "cudaMemcpy",
                             ordinal_, "copy to device");
}

Status CudaDeviceCompute::copy_to_host(std::span<std::byte> dst, DevicePtr src) {
  ENGRAM_RETURN_IF_ERROR(make_current("copy to host"));
  return cuda_runtime_status(cudaMemcpy(dst.data(), ptr(src), dst.size(), cudaMemcpyDeviceToHost), "cudaMemcpy",
                             ordinal_, "copy to host");
}

Status CudaDeviceCompute::copy_to_host_strided(std::span<std::byte> dst, DevicePtr src, uint64_t row_bytes,
                                               uint64_t src_pitch_bytes) {
  ENGRAM_RETURN_IF_ERROR(check_strided_copy(dst.size(), row_bytes, src_pitch_bytes, -1));  // the caller names the rank
  if (dst.empty()) return Status::ok();
  ENGRAM_RETURN_IF_ERROR(make_current("copy to host"));
  return cuda_runtime_status(cudaMemcpy2D(dst.data(), row_bytes, ptr(src), src_pitch_bytes, row_bytes,
                                          dst.size() / row_bytes, cudaMemcpyDeviceToHost),
                             "cudaMemcpy2D", ordinal_, "copy to host");
}

Status CudaDeviceCompute::copy_async(DevicePtr dst, DevicePtr src, uint64_t bytes, StreamRef stream) {
  if (bytes == 0) return Status::ok();
  return cuda_runtime_status(cudaMemcpyAsync(ptr(dst), ptr(src), bytes, cudaMemcpyDefault, stream_of(stream)),
                             "cudaMemcpyAsync", ordinal_, "copy");
}

Status CudaDeviceCompute::fill_async(DevicePtr dst, uint8_t value, uint64_t bytes, StreamRef stream) {
  if (bytes == 0) return Status::ok();
  return cuda_runtime_status(cudaMemsetAsync(ptr(dst), value, bytes, stream_of(stream)), "cudaMemsetAsync", ordinal_,
                             "fill");
}

Status CudaDeviceCompute::gather(const DeviceGather& a, StreamRef stream) {
  const kernels::RowLayout layout = kernel_layout(a.layout);
  auto* out = static_cast<uint16_t*>(ptr(a.out));
  const auto* ids = static_cast<const int64_t*>(ptr(a.ids));
  if (a.shard_count > 0) {
    if (a.head_begin != 0 || a.head_count != a.ids_per_token) {
      return invalid_argument(fmt::format("gather: a shard source reads every head; heads [{}, {}) of {} is a window",
                                          a.head_begin, a.head_begin + a.head_count, a.ids_per_token));
    }
    if (!a.zero_missing) {
      return invalid_argument("gather: a shard source writes zero rows for ids it does not hold (zero_missing)");
    }
    kernels::GatherPeerArgs g;
    g.ids = ids;
    g.tokens = a.tokens;
    g.heads = a.ids_per_token;
    g.shard_starts = static_cast<const int64_t*>(ptr(a.shard_starts));
    g.shard_bases = static_cast<const void* const*>(ptr(a.shard_bases));
    g.shard_count = a.shard_count;
    g.layout = layout;
    g.out = out;
    return kernels::gather_peer(g, stream_of(stream));
  }
  const bool whole_window = a.head_begin == 0 && a.head_count == a.ids_per_token;
  if (!a.zero_missing || (a.host_rows == nullptr && whole_window)) {
    // Device rows over every head (the collective path): the owned-rows
    // kernel, which takes more rows a warp as the lookup grows; with
    // zero_missing it also writes the zero rows, so no zero fill is needed.
    if (!whole_window) {
      return invalid_argument("gather: the owned-rows gather reads every head; pass the whole head window");
    }
    kernels::GatherOwnedArgs g;
    g.zero_missing = a.zero_missing;
    g.ids = ids;
    g.tokens = a.tokens;
    g.heads = a.ids_per_token;
    g.shard_begin = a.range_first_row;
    g.shard_end = a.range_first_row + a.range_row_count;
    g.shard_base = ptr(a.range_base);
    g.layout = layout;
    g.out = out;
    return kernels::gather_owned(g, stream_of(stream));
  }
  const int64_t rows = a.tokens * a.head_count;
  if (a.host_rows != nullptr && stager_ != nullptr && rows >= options_.staged_rows_min) {
    HostGatherArgs h;
    h.ids = ids;
    h.tokens = a.tokens;
    h.ids_per_token = a.ids_per_token;
    h.head_begin = a.head_begin;
    h.head_count = a.head_count;
    h.table = a.host_rows;
    h.table_device = ptr(a.range_base);
    h.first_row = a.range_first_row;
    h.row_count = a.range_row_count;
    h.layout = layout;
    h.out = out;
    return stager_->enqueue(h, stream_of(stream));
  }
  kernels::HostRowsArgs g;
  g.ids = ids;
  g.tokens = a.tokens;
  g.ids_per_token = a.ids_per_token;
  g.head_begin = a.head_begin;
  g.head_count = a.head_count;
  g.first_row = a.range_first_row;
  g.row_count = a.range_row_count;
  g.layout = layout;
  g.out = out;
  return kernels::gather_range(g, ptr(a.range_base), stream_of(stream));
}

Status CudaDeviceCompute::fill_table_rows(DevicePtr dst, const TableSpec& table, uint64_t seed, int64_t first_row,
                                          int64_t rows, StreamRef stream) {
  kernels::TableFillArgs f;
  f.rows = ptr(dst);
  f.table = &table;
  f.seed = seed;
  f.first_row = first_row;
  f.row_count = rows;
  return kernels::fill_table_rows(f, stream_of(stream));
}

Status CudaDeviceCompute::hash_requests(const DeviceRequestHash& a, StreamRef stream) {
  ENGRAM_RETURN_IF_ERROR(check_request_hash(a));
  kernels::RequestHashArgs k;
  k.table = hash_table(a.state);
  k.verify = a.verify;
  k.tokens = static_cast<const int64_t*>(ptr(a.tokens));
  k.token_count = a.token_count;
  k.header = static_cast<const int64_t*>(ptr(a.header));
  k.runs = static_cast<const DeviceRunWords*>(ptr(a.runs));
  k.row_ids = static_cast<int64_t*>(ptr(a.row_ids));
  return kernels::request_hash(k, stream_of(stream));
}

Status CudaDeviceCompute::commit_requests(const DeviceRequestCommit& a, StreamRef stream) {
  ENGRAM_RETURN_IF_ERROR(check_request_commit(a));
  kernels::RequestCommitArgs k;
  k.table = hash_table(a.state);
  k.header = static_cast<const int64_t*>(ptr(a.header));
  k.commits = static_cast<const DeviceCommitWords*>(ptr(a.commits));
  return kernels::request_commit(k, stream_of(stream));
}

Status CudaDeviceCompute::synchronize(StreamRef stream) {
  ENGRAM_RETURN_IF_ERROR(make_current("synchronize"));
  return cuda_runtime_status(cudaStreamSynchronize(stream_of(stream)), "cudaStreamSynchronize", ordinal_,
                             "synchronize");
}

namespace {

// A captured lookup on this rank's GPU, replayed and timed by the bench's
// method (backends/cuda/graph_timing.h). The timer's stream is the graph's.
class CudaDeviceGraph final : public DeviceGraph {
 public:
  CudaDeviceGraph(std::unique_ptr<GraphTimer> timer, GpuGraphs graphs)
      : timer_(std::move(timer)), graphs_(std::move(graphs)) {}

  Status replay() override {
    ENGRAM_RETURN_IF_ERROR(timer_->launch(graphs_));
    return timer_->synchronize();
  }

  Result<std::vector<double>> time(int warmup, int replays) override {
    ENGRAM_CHECK(warmup >= 0 && replays >= 1);
    // The timer's replay count is fixed when it is made (with the stream
    // the graph was captured on), so replays are timed in rounds of it.
    for (int i = 0; i < warmup; ++i) ENGRAM_RETURN_IF_ERROR(timer_->launch(graphs_));
    std::vector<double> out;
    while (static_cast<int>(out.size()) < replays) {
      ENGRAM_ASSIGN_OR_RETURN(std::vector<double> round, timer_->time([&] { return timer_->launch(graphs_); }));
      out.insert(out.end(), round.begin(), round.end());
    }
    out.resize(static_cast<size_t>(replays));
    ENGRAM_RETURN_IF_ERROR(timer_->synchronize());
    return out;
  }

 private:
  std::unique_ptr<GraphTimer> timer_;
  GpuGraphs graphs_;
};

constexpr int kTimedReplaysPerRound = 20;

}  // namespace

Result<std::unique_ptr<DeviceGraph>> CudaDeviceCompute::capture(const std::function<Status(StreamRef)>& enqueue) {
  ENGRAM_RETURN_IF_ERROR(make_current("capture"));
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<GraphTimer> timer,
                          GraphTimer::create({ordinal_}, kTimedReplaysPerRound, /*warmup=*/0, /*cold_l2=*/false));
  const StreamRef stream{reinterpret_cast<uintptr_t>(timer->stream(0))};
  ENGRAM_ASSIGN_OR_RETURN(GpuGraphs graphs, timer->capture([&] { return enqueue(stream); }));
  return std::unique_ptr<DeviceGraph>(new CudaDeviceGraph(std::move(timer), std::move(graphs)));
}

Result<std::unique_ptr<DeviceCollectives>> CudaDeviceCompute::connect(Collectives& bootstrap) {
  auto comm = NcclCommunicator::create(bootstrap, ordinal_);
  if (!comm.is_ok()) return std::move(comm).take_status();
  return std::unique_ptr<DeviceCollectives>(new NcclDeviceCollectives(std::move(comm).value()));
}

}  // namespace engram::cuda
