// The bench's timing method, for any set of GPUs this process drives (all
// of them in the one-process bench, its own one in a rank process): one
// stream per GPU, a lookup captured into one graph per GPU (all captures
// open together, so NCCL calls spanning them are captured too), and replays
// event-timed on the first GPU with the host running ahead behind a spin
// kernel, so every replay starts as soon as the one before it ends.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <vector>

#include "backends/cuda/gpu_buffer.h"
#include "core/base/status.h"

namespace engram::cuda {

// One graph per GPU of a GraphTimer.
class GpuGraphs {
 public:
  GpuGraphs() = default;
  ~GpuGraphs() { reset(); }
  GpuGraphs(GpuGraphs&& o) noexcept { *this = std::move(o); }
  GpuGraphs& operator=(GpuGraphs&& o) noexcept;
  GpuGraphs(const GpuGraphs&) = delete;
  GpuGraphs& operator=(const GpuGraphs&) = delete;
  void reset();

 private:
  friend class GraphTimer;
  std::vector<int> gpus_;
  std::vector<cudaGraph_t> graphs_;
  std::vector<cudaGraphExec_t> execs_;
};

class GraphTimer {
 public:
  // `cold_l2`: a 4 x L2 buffer is read on every GPU before each replay.
  static Result<std::unique_ptr<GraphTimer>> create(std::vector<int> gpus, int replays, int warmup, bool cold_l2);
  ~GraphTimer();
  GraphTimer(const GraphTimer&) = delete;
  GraphTimer& operator=(const GraphTimer&) = delete;

  size_t size() const { return gpus_.size(); }
  int gpu(size_t i) const { return gpus_[i]; }
  cudaStream_t stream(size_t i) const { return streams_[i]; }

  // Captures what `enqueue` puts on every GPU's stream into one graph per GPU.
  Result<GpuGraphs> capture(const std::function<Status()>& enqueue);
  Status launch(const GpuGraphs& graphs);
  // Enqueues `launch` warmup + replays times; the first GPU's replay times in us.
  Result<std::vector<double>> time(const std::function<Status()>& launch);
  // The same with `replays` timed (1 to the timer's own count): a share of
  // them, for a figure spread over several draws of ids.
  Result<std::vector<double>> time(const std::function<Status()>& launch, int replays);
  Status synchronize();

 private:
  GraphTimer(std::vector<int> gpus, int replays, int warmup, bool cold)
      : gpus_(std::move(gpus)), replays_(replays), warmup_(warmup), cold_(cold) {}
  Status init();

  std::vector<int> gpus_;
  int replays_;
  int warmup_;
  bool cold_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> start_, end_;
  std::vector<GpuBuffer> scrub_, sinks_;
};

}  // namespace engram::cuda
