// cudaMalloc'ed bytes on one GPU, freed there, and the Status for a failed
// CUDA runtime call. Shared by the lookup bench and the local peer shards.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace engram::cuda {

// "<call> failed on GPU <gpu>: <error name> (<text>)" with `step` as the
// context's step and `gpu` as its rank; out of memory -> kResourceExhausted,
// anything else kInternal. OK for cudaSuccess.
Status cuda_runtime_status(cudaError_t error, const std::string& call, int gpu, const std::string& step);

class GpuBuffer {
 public:
  GpuBuffer() = default;
  // At least 16 bytes are allocated so that an empty buffer is still a valid
  // pointer; bytes() reports what was asked for.
  static Result<GpuBuffer> allocate(int gpu, uint64_t bytes, const std::string& step);
  ~GpuBuffer();
  GpuBuffer(GpuBuffer&& o) noexcept { *this = std::move(o); }
  GpuBuffer& operator=(GpuBuffer&& o) noexcept;
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;

  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  void* get() const { return ptr_; }
  uint64_t bytes() const { return bytes_; }

 private:
  int gpu_ = -1;
  void* ptr_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace engram::cuda
