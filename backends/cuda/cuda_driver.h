// The CUDA driver API, loaded at run time from libcuda.so.1. The driver
// library ships with the GPU driver, not the toolkit: a binary linked against
// it would not even start on a build or CI machine without a GPU, so we dlopen
// it and report "no driver" as a Status instead.
#pragma once

#include <cuda.h>

#include <optional>
#include <string>

#include "core/base/status.h"

namespace engram::cuda {

struct DriverApi {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDriverGetVersion) driver_get_version = nullptr;
  decltype(&::cuDeviceGetCount) device_get_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetName) device_get_name = nullptr;
  decltype(&::cuDeviceTotalMem) device_total_mem = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuDeviceCanAccessPeer) device_can_access_peer = nullptr;
  decltype(&::cuDeviceGetPCIBusId) device_get_pci_bus_id = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&::cuMemGetInfo) mem_get_info = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemExportToShareableHandle) mem_export_to_shareable_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) mem_import_from_shareable_handle = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuMemcpyHtoD) memcpy_htod = nullptr;
  decltype(&::cuMemcpyDtoH) memcpy_dtoh = nullptr;
};

// Loads the library and runs cuInit(0) once per process. Errors:
// kFailedPrecondition when libcuda.so.1 is missing (no driver installed) or
// cuInit fails (CUDA_ERROR_NO_DEVICE where the driver sees no GPU).
Result<const DriverApi*> driver_api();

// "CUDA_ERROR_NOT_PERMITTED (operation not permitted)".
std::string cu_error_text(CUresult result);

// NOT_PERMITTED -> kPermissionDenied, OUT_OF_MEMORY -> kResourceExhausted,
// INVALID_DEVICE / NO_DEVICE / NOT_SUPPORTED -> kFailedPrecondition, ...
ErrorCode error_code_for(CUresult result);

// A Status for a failed driver call: "<call> failed on GPU <ordinal>: <error
// name> (<text>)<detail>", with `step` as the context's step.
Status cu_status(CUresult result, const char* call, int ordinal, const std::string& step,
                 const std::string& detail = "");

// How many GPUs this process sees; 0 with `reason` filled when none (no
// driver library, cuInit failed, or the count is 0).
struct GpuPresence {
  int count = 0;
  std::string reason;
};
GpuPresence gpu_presence();

// cuDeviceGetPCIBusId: "0000:3b:00.0" for `ordinal` (CUDA_VISIBLE_DEVICES
// applies), the key NVML and sysfs know the same GPU by.
Result<std::string> pci_bus_id(int ordinal);

// cuDeviceCanAccessPeer(from, to): can `from` map and access `to`'s memory.
Result<bool> can_access_peer(int from_ordinal, int to_ordinal);

// The machine this process is on when the driver is the emulated one
// (backends/emulated_driver): every emulated host of a job shares one real
// machine, so only the driver knows which host a rank stands for. nullopt on
// a real driver (it has no such symbol) or without a loaded driver.
struct EmulatedHost {
  std::string hostname;
  std::string boot_id;
  bool imex_channel = false;
};
std::optional<EmulatedHost> emulated_host();

}  // namespace engram::cuda
