#include "backends/cuda/graph_timing.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/units.h"
#include "kernels/timing_kernels.h"

namespace engram::cuda {
namespace {

Status rt(cudaError_t error, const char* call, int gpu) { return cuda_runtime_status(error, call, gpu, "bench"); }

}  // namespace

GpuGraphs& GpuGraphs::operator=(GpuGraphs&& o) noexcept {
  if (this != &o) {
    reset();
    gpus_ = std::move(o.gpus_);
    graphs_ = std::move(o.graphs_);
    execs_ = std::move(o.execs_);
    o.gpus_.clear();
    o.graphs_.clear();
    o.execs_.clear();
  }
  return *this;
}

void GpuGraphs::reset() {
  for (size_t i = 0; i < execs_.size(); ++i) {
    cudaSetDevice(gpus_[i]);
    if (execs_[i] != nullptr) cudaGraphExecDestroy(execs_[i]);
    if (graphs_[i] != nullptr) cudaGraphDestroy(graphs_[i]);
  }
  execs_.clear();
  graphs_.clear();
  gpus_.clear();
}

Result<std::unique_ptr<GraphTimer>> GraphTimer::create(std::vector<int> gpus, int replays, int warmup, bool cold_l2) {
  if (gpus.empty() || replays < 1 || warmup < 0) {
    return invalid_argument("graph timer: needs at least one GPU, replays >= 1 and warmup >= 0");
  }
  std::unique_ptr<GraphTimer> timer(new GraphTimer(std::move(gpus), replays, warmup, cold_l2));
  ENGRAM_RETURN_IF_ERROR(timer->init());
  return timer;
}

Status GraphTimer::init() {
  for (int g : gpus_) {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(g), "cudaSetDevice", g));
    cudaStream_t s = nullptr;
    ENGRAM_RETURN_IF_ERROR(rt(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", g));
    streams_.push_back(s);
    if (cold_) {
      cudaDeviceProp prop{};
      ENGRAM_RETURN_IF_ERROR(rt(cudaGetDeviceProperties(&prop, g), "cudaGetDeviceProperties", g));
      ENGRAM_ASSIGN_OR_RETURN(GpuBuffer b, GpuBuffer::allocate(g, round_up(4ull * prop.l2CacheSize, 16), "bench"));
      ENGRAM_RETURN_IF_ERROR(rt(cudaMemset(b.get(), 1, b.bytes()), "cudaMemset scrub buffer", g));
      scrub_.push_back(std::move(b));
      ENGRAM_ASSIGN_OR_RETURN(GpuBuffer sink, GpuBuffer::allocate(g, sizeof(uint64_t), "bench"));
      sinks_.push_back(std::move(sink));
    }
  }
  ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpus_[0]), "cudaSetDevice", gpus_[0]));
  for (int i = 0; i < replays_; ++i) {
    cudaEvent_t a = nullptr, b = nullptr;
    ENGRAM_RETURN_IF_ERROR(rt(cudaEventCreate(&a), "cudaEventCreate", gpus_[0]));
    start_.push_back(a);
    ENGRAM_RETURN_IF_ERROR(rt(cudaEventCreate(&b), "cudaEventCreate", gpus_[0]));
    end_.push_back(b);
  }
  return Status::ok();
}

GraphTimer::~GraphTimer() {
  for (size_t i = 0; i < streams_.size(); ++i) {
    cudaSetDevice(gpus_[i]);
    cudaStreamSynchronize(streams_[i]);
    cudaStreamDestroy(streams_[i]);
  }
  if (!gpus_.empty()) cudaSetDevice(gpus_[0]);
  for (auto e : start_) cudaEventDestroy(e);
  for (auto e : end_) cudaEventDestroy(e);
}

Result<GpuGraphs> GraphTimer::capture(const std::function<Status()>& enqueue) {
  GpuGraphs out;
  out.gpus_ = gpus_;
  out.graphs_.assign(gpus_.size(), nullptr);
  out.execs_.assign(gpus_.size(), nullptr);
  for (size_t i = 0; i < gpus_.size(); ++i) {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpus_[i]), "cudaSetDevice", gpus_[i]));
    ENGRAM_RETURN_IF_ERROR(rt(cudaStreamBeginCapture(streams_[i], cudaStreamCaptureModeRelaxed),
                              "cudaStreamBeginCapture", gpus_[i]));
  }
  Status enqueued = enqueue();
  Status ended;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    cudaSetDevice(gpus_[i]);
    Status e = rt(cudaStreamEndCapture(streams_[i], &out.graphs_[i]), "cudaStreamEndCapture", gpus_[i]);
    if (ended.is_ok() && !e.is_ok()) ended = std::move(e);
  }
  ENGRAM_RETURN_IF_ERROR(std::move(enqueued));
  ENGRAM_RETURN_IF_ERROR(std::move(ended));
  for (size_t i = 0; i < gpus_.size(); ++i) {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpus_[i]), "cudaSetDevice", gpus_[i]));
    ENGRAM_RETURN_IF_ERROR(rt(cudaGraphInstantiate(&out.execs_[i], out.graphs_[i], 0), "cudaGraphInstantiate", gpus_[i]));
  }
  return out;
}

Status GraphTimer::launch(const GpuGraphs& graphs) {
  for (size_t i = 0; i < graphs.execs_.size(); ++i) {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpus_[i]), "cudaSetDevice", gpus_[i]));
    ENGRAM_RETURN_IF_ERROR(rt(cudaGraphLaunch(graphs.execs_[i], streams_[i]), "cudaGraphLaunch", gpus_[i]));
  }
  return Status::ok();
}

Status GraphTimer::synchronize() {
  for (size_t i = 0; i < gpus_.size(); ++i) {
    ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpus_[i]), "cudaSetDevice", gpus_[i]));
    ENGRAM_RETURN_IF_ERROR(rt(cudaStreamSynchronize(streams_[i]), "cudaStreamSynchronize", gpus_[i]));
  }
  return Status::ok();
}

Result<std::vector<double>> GraphTimer::time(const std::function<Status()>& launch) { return time(launch, replays_); }

Result<std::vector<double>> GraphTimer::time(const std::function<Status()>& launch, int replays) {
  if (replays < 1 || replays > replays_) {
    return invalid_argument(fmt::format("graph timer: {} replays asked of a timer made for 1 to {}", replays, replays_));
  }
  for (int i = 0; i < warmup_; ++i) ENGRAM_RETURN_IF_ERROR(launch());
  ENGRAM_RETURN_IF_ERROR(synchronize());
  constexpr int kChunk = 20;
  const int first_gpu = gpus_[0];
  for (int first = 0; first < replays; first += kChunk) {
    for (size_t g = 0; g < gpus_.size(); ++g) {
      ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpus_[g]), "cudaSetDevice", gpus_[g]));
      ENGRAM_RETURN_IF_ERROR(kernels::spin(2'000'000, streams_[g]));  // 2 ms: the host queues the chunk
    }
    for (int i = first; i < std::min(replays, first + kChunk); ++i) {
      if (cold_) {
        for (size_t g = 0; g < gpus_.size(); ++g) {
          ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(gpus_[g]), "cudaSetDevice", gpus_[g]));
          ENGRAM_RETURN_IF_ERROR(kernels::scrub_l2(scrub_[g].get(), scrub_[g].bytes(), sinks_[g].as<uint64_t>(),
                                                   streams_[g]));
        }
      }
      ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(first_gpu), "cudaSetDevice", first_gpu));
      ENGRAM_RETURN_IF_ERROR(rt(cudaEventRecord(start_[static_cast<size_t>(i)], streams_[0]), "cudaEventRecord", first_gpu));
      ENGRAM_RETURN_IF_ERROR(launch());
      ENGRAM_RETURN_IF_ERROR(rt(cudaSetDevice(first_gpu), "cudaSetDevice", first_gpu));
      ENGRAM_RETURN_IF_ERROR(rt(cudaEventRecord(end_[static_cast<size_t>(i)], streams_[0]), "cudaEventRecord", first_gpu));
    }
    ENGRAM_RETURN_IF_ERROR(synchronize());
  }
  std::vector<double> us;
  for (int i = 0; i < replays; ++i) {
    float ms = 0;
    ENGRAM_RETURN_IF_ERROR(rt(cudaEventElapsedTime(&ms, start_[static_cast<size_t>(i)], end_[static_cast<size_t>(i)]),
                              "cudaEventElapsedTime", first_gpu));
    us.push_back(static_cast<double>(ms) * 1000.0);
  }
  return us;
}

}  // namespace engram::cuda
