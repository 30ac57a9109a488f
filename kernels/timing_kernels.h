// The kernels the graph timer (backends/cuda/graph_timing.h) enqueues
// around timed replays: a globaltimer spin that lets the host queue work
// ahead of the GPU, and an L2 scrub. Each call only enqueues on `stream`
// (capturable); errors are kInvalidArgument naming the field or kInternal
// with the CUDA error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/base/status.h"

namespace engram::kernels {

// One thread spins until `nanoseconds` have passed on the GPU's globaltimer.
Status spin(uint64_t nanoseconds, cudaStream_t stream);

// Reads `bytes` (multiple of 16) so that earlier lines leave the L2; the sum
// lands in `sink` (one uint64) so the reads cannot be dropped.
Status scrub_l2(const void* buffer, uint64_t bytes, uint64_t* sink, cudaStream_t stream);

}  // namespace engram::kernels
