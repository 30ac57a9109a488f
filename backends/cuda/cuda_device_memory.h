// DeviceMemory over the CUDA driver's VMM API for one GPU of this process.
// Every call makes the GPU's primary context current first (the one cudart
// and NCCL use), so several instances for several GPUs work in one thread.
#pragma once

#include <cuda.h>

#include <memory>

#include "core/backend/device_memory.h"
#include "backends/cuda/cuda_driver.h"

namespace engram::cuda {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  // Retains GPU `ordinal`'s primary context. kFailedPrecondition when there is
  // no driver or no such GPU.
  static Result<std::unique_ptr<CudaDeviceMemory>> open(int ordinal);
  ~CudaDeviceMemory() override;
  CudaDeviceMemory(const CudaDeviceMemory&) = delete;
  CudaDeviceMemory& operator=(const CudaDeviceMemory&) = delete;

  int ordinal() const { return ordinal_; }
  CUcontext context() const { return context_; }

  Result<DeviceInfo> info() override;
  Status probe_fabric() override;

  Result<AllocationHandle> create(uint64_t bytes, HandleType exportable_as) override;
  Result<ShareableHandle> export_handle(AllocationHandle allocation, HandleType type) override;
  Result<AllocationHandle> import_handle(const ShareableHandle& handle) override;
  Result<DevicePtr> reserve(uint64_t bytes) override;
  Status map(DevicePtr address, uint64_t bytes, AllocationHandle allocation) override;
  Status set_access(DevicePtr address, uint64_t bytes) override;
  Status unmap(DevicePtr address, uint64_t bytes) override;
  Status release(AllocationHandle allocation) override;
  Status free_reservation(DevicePtr address, uint64_t bytes) override;
  Status close_fd(int fd) override;

  Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) override;
  Status copy_from_device(std::span<std::byte> dst, DevicePtr src) override;
  Status synchronize() override;

  // Minimum VMM granularity for allocations exportable as `type`.
  Result<uint64_t> granularity(HandleType type);
  // (free, total) bytes of this GPU as cuMemGetInfo reports them.
  Result<std::pair<uint64_t, uint64_t>> memory_info();

 private:
  CudaDeviceMemory(const DriverApi* api, int ordinal, CUdevice device, CUcontext context)
      : api_(api), ordinal_(ordinal), device_(device), context_(context) {}
  // Every failure names its step from the one table (core/backend/device_memory.h).
  Status make_current(DeviceStep step);
  Status fail(CUresult result, const char* call, DeviceStep step, const std::string& detail = "");
  Result<uint64_t> granularity_for(HandleType type, DeviceStep step);
  Result<std::pair<uint64_t, uint64_t>> memory_info_for(DeviceStep step);
  CUmemAllocationProp allocation_prop(HandleType type) const;

  const DriverApi* api_;
  int ordinal_;
  CUdevice device_;
  CUcontext context_;
};

}  // namespace engram::cuda
