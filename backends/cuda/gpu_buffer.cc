#include "backends/cuda/gpu_buffer.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/base/units.h"

namespace engram::cuda {

Status cuda_runtime_status(cudaError_t error, const std::string& call, int gpu, const std::string& step) {
  if (error == cudaSuccess) return Status::ok();
  // The error is now this Status: take it off the runtime's last-error slot,
  // or the next kernel launch's cudaGetLastError reports it as its own (an
  // out-of-memory the caller handled, e.g. the bench's one-process reference
  // on a GPU too small for it, failed the next placement's first launch).
  // A sticky error stays on the context whatever this does.
  (void)cudaGetLastError();
  return Status(error == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
                fmt::format("{} failed on GPU {}: {} ({})", call, gpu, cudaGetErrorName(error),
                            cudaGetErrorString(error)),
                ErrorContext{.rank = gpu, .step = step});
}

Result<GpuBuffer> GpuBuffer::allocate(int gpu, uint64_t bytes, const std::string& step) {
  GpuBuffer b;
  b.gpu_ = gpu;
  b.bytes_ = bytes;
  ENGRAM_RETURN_IF_ERROR(cuda_runtime_status(cudaSetDevice(gpu), "cudaSetDevice", gpu, step));
  ENGRAM_RETURN_IF_ERROR(cuda_runtime_status(cudaMalloc(&b.ptr_, std::max<uint64_t>(bytes, 16)),
                                             fmt::format("cudaMalloc({})", format_bytes(bytes)), gpu, step));
  return b;
}

GpuBuffer::~GpuBuffer() {
  if (ptr_ != nullptr) {
    cudaSetDevice(gpu_);
    cudaFree(ptr_);
  }
}

GpuBuffer& GpuBuffer::operator=(GpuBuffer&& o) noexcept {
  std::swap(gpu_, o.gpu_);
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

}  // namespace engram::cuda
