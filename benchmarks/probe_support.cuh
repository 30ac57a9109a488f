// What the GPU probes (benchmarks/*_probe.cu) share: checked CUDA calls that
// exit naming the probe and the call, a replay count from the command line,
// graph capture, and the bench's timing method: the host queues a chunk of
// replays behind a spin kernel on every GPU, events around each replay on
// the first GPU listed, median of the event times.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace engram::probe {

inline const char*& probe_name() {
  static const char* name = "probe";
  return name;
}

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", probe_name(), what, cudaGetErrorString(e));
    std::exit(1);
  }
}

inline void check(const Status& s, const char* what) {
  if (!s.is_ok()) {
    std::fprintf(stderr, "%s: %s: %s\n", probe_name(), what, s.to_string().c_str());
    std::exit(1);
  }
}

// argv[1] if given (a whole number >= 1), else `fallback`; anything else
// exits 2 naming the value and the fix.
inline int replays_from_args(int argc, char** argv, int fallback) {
  if (argc < 2) return fallback;
  char* end = nullptr;
  const long value = std::strtol(argv[1], &end, 10);
  if (end == argv[1] || *end != '\0' || value < 1 || value > 100000) {
    std::fprintf(stderr, "%s: replays '%s' must be a whole number from 1 to 100000, e.g. %s 200\n", probe_name(),
                 argv[1], argv[0]);
    std::exit(2);
  }
  return static_cast<int>(value);
}

__global__ void spin_kernel(uint64_t nanoseconds) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); while (now - start < nanoseconds);
}

// One graph of what `body` enqueues on `stream` (the current device's).
inline cudaGraphExec_t capture(cudaStream_t stream, const std::function<void(cudaStream_t)>& body) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  body(stream);
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  return exec;
}

// Times `replays` replays, each `launch(i)` for every i (device devices[i],
// stream streams[i], made current before the call), after 20 untimed ones.
// Events on devices[0]'s stream. Returns the times in us, sorted.
inline std::vector<double> time_replays(const std::vector<int>& devices, const std::vector<cudaStream_t>& streams,
                                        int replays, const std::function<void(size_t)>& launch) {
  constexpr int kChunk = 20;
  auto each = [&](const std::function<void(size_t)>& f) {
    for (size_t i = 0; i < devices.size(); ++i) {
      check(cudaSetDevice(devices[i]), "cudaSetDevice");
      f(i);
    }
  };
  auto sync = [&] { each([&](size_t i) { check(cudaStreamSynchronize(streams[i]), "cudaStreamSynchronize"); }); };
  check(cudaSetDevice(devices[0]), "cudaSetDevice");
  std::vector<cudaEvent_t> start(static_cast<size_t>(replays)), end(static_cast<size_t>(replays));
  for (int i = 0; i < replays; ++i) {
    check(cudaEventCreate(&start[static_cast<size_t>(i)]), "cudaEventCreate");
    check(cudaEventCreate(&end[static_cast<size_t>(i)]), "cudaEventCreate");
  }
  for (int i = 0; i < kChunk; ++i) each(launch);
  sync();
  for (int first = 0; first < replays; first += kChunk) {
    each([&](size_t i) { spin_kernel<<<1, 1, 0, streams[i]>>>(2'000'000); });  // 2 ms: the host queues the chunk
    for (int r = first; r < std::min(replays, first + kChunk); ++r) {
      check(cudaSetDevice(devices[0]), "cudaSetDevice");
      check(cudaEventRecord(start[static_cast<size_t>(r)], streams[0]), "cudaEventRecord");
      each(launch);
      check(cudaSetDevice(devices[0]), "cudaSetDevice");
      check(cudaEventRecord(end[static_cast<size_t>(r)], streams[0]), "cudaEventRecord");
    }
    sync();
  }
  check(cudaGetLastError(), "a launch");
  check(cudaSetDevice(devices[0]), "cudaSetDevice");
  std::vector<double> us;
  for (int i = 0; i < replays; ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start[static_cast<size_t>(i)], end[static_cast<size_t>(i)]), "cudaEventElapsedTime");
    us.push_back(static_cast<double>(ms) * 1000.0);
    cudaEventDestroy(start[static_cast<size_t>(i)]);
    cudaEventDestroy(end[static_cast<size_t>(i)]);
  }
  std::sort(us.begin(), us.end());
  return us;
}

inline double median(const std::vector<double>& sorted) { return sorted[sorted.size() / 2]; }

}  // namespace engram::probe
