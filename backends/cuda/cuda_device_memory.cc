#include "backends/cuda/cuda_device_memory.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/base/units.h"

namespace engram::cuda {
namespace {

const char* step_of(DeviceStep step) { return device_step_name(step); }

CUmemAllocationHandleType to_cu(HandleType type) {
  switch (type) {
    case HandleType::kPosixFd: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case HandleType::kFabric: return CU_MEM_HANDLE_TYPE_FABRIC;
    case HandleType::kNone: return CU_MEM_HANDLE_TYPE_NONE;
  }
  ENGRAM_CHECK(false && "unknown HandleType");
  return CU_MEM_HANDLE_TYPE_NONE;
}

}  // namespace

Result<std::unique_ptr<CudaDeviceMemory>> CudaDeviceMemory::open(int ordinal) {
  ENGRAM_ASSIGN_OR_RETURN(const DriverApi* api, driver_api());
  int count = 0;
  CUresult result = api->device_get_count(&count);
  if (result != CUDA_SUCCESS) return cu_status(result, "cuDeviceGetCount", ordinal, step_of(DeviceStep::kOpen));
  if (ordinal < 0 || ordinal >= count) {
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("GPU ordinal {} does not exist: this process sees {} GPU(s); check "
                              "CUDA_VISIBLE_DEVICES and the container's --gpus",
                              ordinal, count),
                  ErrorContext{.step = step_of(DeviceStep::kOpen)});
  }
  CUdevice device = 0;
  result = api->device_get(&device, ordinal);
  if (result != CUDA_SUCCESS) return cu_status(result, "cuDeviceGet", ordinal, step_of(DeviceStep::kOpen));
  CUcontext context = nullptr;
  result = api->primary_ctx_retain(&context, device);
  if (result != CUDA_SUCCESS) return cu_status(result, "cuDevicePrimaryCtxRetain", ordinal, step_of(DeviceStep::kOpen));
  return std::unique_ptr<CudaDeviceMemory>(new CudaDeviceMemory(api, ordinal, device, context));
}

CudaDeviceMemory::~CudaDeviceMemory() {
  // Allocations and mappings are the caller's to undo; the context reference
  // is ours.
  api_->primary_ctx_release(device_);
}

Status CudaDeviceMemory::fail(CUresult result, const char* call, DeviceStep step, const std::string& detail) {
  return cu_status(result, call, ordinal_, step_of(step), detail);
}

Status CudaDeviceMemory::make_current(DeviceStep step) {
  CUresult result = api_->ctx_set_current(context_);
  if (result != CUDA_SUCCESS) return fail(result, "cuCtxSetCurrent", step);
  return Status::ok();
}

CUmemAllocationProp CudaDeviceMemory::allocation_prop(HandleType type) const {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  prop.requestedHandleTypes = to_cu(type);
  return prop;
}

Result<uint64_t> CudaDeviceMemory::granularity(HandleType type) {
  return granularity_for(type, DeviceStep::kGranularity);
}

Result<uint64_t> CudaDeviceMemory::granularity_for(HandleType type, DeviceStep step) {
  ENGRAM_RETURN_IF_ERROR(make_current(step));
  CUmemAllocationProp prop = allocation_prop(type);
  size_t bytes = 0;
  CUresult result = api_->mem_get_allocation_granularity(&bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (result != CUDA_SUCCESS) {
    return fail(result, "cuMemGetAllocationGranularity", step,
                fmt::format(" (handle type {})", handle_type_name(type)));
  }
  ENGRAM_CHECK(bytes > 0);
  return static_cast<uint64_t>(bytes);
}

Result<std::pair<uint64_t, uint64_t>> CudaDeviceMemory::memory_info() {
  return memory_info_for(DeviceStep::kMemoryInfo);
}

Result<std::pair<uint64_t, uint64_t>> CudaDeviceMemory::memory_info_for(DeviceStep step) {
  ENGRAM_RETURN_IF_ERROR(make_current(step));
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CUresult result = api_->mem_get_info(&free_bytes, &total_bytes);
  if (result != CUDA_SUCCESS) return fail(result, "cuMemGetInfo", step);
  return std::pair<uint64_t, uint64_t>{free_bytes, total_bytes};
}

Result<DeviceInfo> CudaDeviceMemory::info() {
  DeviceInfo out;
  out.ordinal = ordinal_;
  char name[256] = {};
  CUresult result = api_->device_get_name(name, sizeof(name) - 1, device_);
  if (result != CUDA_SUCCESS) return fail(result, "cuDeviceGetName", DeviceStep::kInfo);
  out.name = name;
  auto attribute = [&](CUdevice_attribute which, const char* what) -> Result<bool> {
    int value = 0;
    CUresult r = api_->device_get_attribute(&value, which, device_);
    if (r != CUDA_SUCCESS) return fail(r, "cuDeviceGetAttribute", DeviceStep::kInfo, fmt::format(" ({})", what));
    return value != 0;
  };
  ENGRAM_ASSIGN_OR_RETURN(out.vmm_supported,
                          attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "VMM"));
  ENGRAM_ASSIGN_OR_RETURN(out.posix_fd_supported,
                          attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, "POSIX fd"));
  ENGRAM_ASSIGN_OR_RETURN(out.fabric_attribute,
                          attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, "FABRIC"));
  if (auto bus = pci_bus_id(ordinal_); bus.is_ok()) out.bus_id = *bus;  // unknown: no sharing is seen
  ENGRAM_ASSIGN_OR_RETURN(auto memory, memory_info_for(DeviceStep::kInfo));
  out.memory_bytes_free = memory.first;
  out.memory_bytes_total = memory.second;
  if (out.vmm_supported) {
    ENGRAM_ASSIGN_OR_RETURN(out.granularity_bytes,
                            granularity_for(out.posix_fd_supported ? HandleType::kPosixFd : HandleType::kFabric,
                                            DeviceStep::kInfo));
  }
  return out;
}

Status CudaDeviceMemory::probe_fabric() {
  int attribute = 0;
  CUresult result = api_->device_get_attribute(&attribute, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, device_);
  if (result != CUDA_SUCCESS) return fail(result, "cuDeviceGetAttribute", DeviceStep::kProbeFabric, " (FABRIC)");
  if (attribute == 0) {
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("GPU {} does not support FABRIC handles "
                              "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0): needs a multi-node "
                              "NVLink system (GB200/GB300 NVL) and a driver with IMEX",
                              ordinal_),
                  ErrorContext{.step = step_of(DeviceStep::kProbeFabric)});
  }
  // The attribute alone lies when no IMEX channel exists: only a real create
  // and export tell. Every failure below is the probe's step, whichever call
  // inside it failed (the message names the call).
  ENGRAM_ASSIGN_OR_RETURN(uint64_t bytes, granularity_for(HandleType::kFabric, DeviceStep::kProbeFabric));
  auto allocation = create(bytes, HandleType::kFabric);
  if (!allocation.is_ok()) {
    Status status = std::move(allocation).take_status();
    return Status(status.code(),
                  status.message() + "; the FABRIC attribute is set but creating a FABRIC allocation "
                                     "failed: is an IMEX channel (/dev/nvidia-caps-imex-channels/channel0) "
                                     "present and the IMEX daemon running?",
                  ErrorContext{.step = step_of(DeviceStep::kProbeFabric)});
  }
  auto exported = export_handle(*allocation, HandleType::kFabric);
  Status released = release(*allocation);
  if (!exported.is_ok()) {
    Status status = std::move(exported).take_status();
    return Status(status.code(), status.message() + "; FABRIC create worked but export failed",
                  ErrorContext{.step = step_of(DeviceStep::kProbeFabric)});
  }
  if (!released.is_ok())
    return Status(released.code(), released.message() + "; releasing the probe's FABRIC allocation failed",
                  ErrorContext{.step = step_of(DeviceStep::kProbeFabric)});
  return Status::ok();
}

Result<AllocationHandle> CudaDeviceMemory::create(uint64_t bytes, HandleType exportable_as) {
  ENGRAM_ASSIGN_OR_RETURN(uint64_t gran, granularity_for(exportable_as, DeviceStep::kCreate));
  if (bytes == 0 || bytes % gran != 0) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("allocation size {} bytes on GPU {} is not a positive multiple of the VMM "
                              "granularity {} bytes; round it up with round_up(bytes, granularity)",
                              bytes, ordinal_, gran),
                  ErrorContext{.step = step_of(DeviceStep::kCreate)});
  }
  CUmemAllocationProp prop = allocation_prop(exportable_as);
  CUmemGenericAllocationHandle handle = 0;
  CUresult result = api_->mem_create(&handle, bytes, &prop, 0);
  if (result != CUDA_SUCCESS) {
    return fail(result, "cuMemCreate", DeviceStep::kCreate,
                fmt::format(" ({} exportable as {})", format_bytes(bytes), handle_type_name(exportable_as)));
  }
  return static_cast<AllocationHandle>(handle);
}

Result<ShareableHandle> CudaDeviceMemory::export_handle(AllocationHandle allocation, HandleType type) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kExport));
  ShareableHandle out;
  out.type = type;
  CUresult result = CUDA_SUCCESS;
  if (type == HandleType::kPosixFd) {
    int fd = -1;
    result = api_->mem_export_to_shareable_handle(&fd, allocation, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    out.fd = fd;
  } else {
    CUmemFabricHandle fabric;
    static_assert(sizeof(fabric) == kFabricHandleBytes);
    result = api_->mem_export_to_shareable_handle(&fabric, allocation, CU_MEM_HANDLE_TYPE_FABRIC, 0);
    std::memcpy(out.fabric.data(), &fabric, kFabricHandleBytes);
  }
  if (result != CUDA_SUCCESS) {
    return fail(result, "cuMemExportToShareableHandle", DeviceStep::kExport,
                fmt::format(" (as {})", handle_type_name(type)));
  }
  if (type == HandleType::kPosixFd) ENGRAM_CHECK(out.fd >= 0);
  return out;
}

Result<AllocationHandle> CudaDeviceMemory::import_handle(const ShareableHandle& handle) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kImport));
  CUmemGenericAllocationHandle allocation = 0;
  CUresult result = CUDA_SUCCESS;
  if (handle.type == HandleType::kPosixFd) {
    if (handle.fd < 0) {
      return Status(ErrorCode::kInvalidArgument, fmt::format("import on GPU {}: fd {} is not valid", ordinal_, handle.fd),
                    ErrorContext{.step = step_of(DeviceStep::kImport)});
    }
    result = api_->mem_import_from_shareable_handle(
        &allocation, reinterpret_cast<void*>(static_cast<uintptr_t>(handle.fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  } else {
    CUmemFabricHandle fabric;
    std::memcpy(&fabric, handle.fabric.data(), kFabricHandleBytes);
    result = api_->mem_import_from_shareable_handle(&allocation, &fabric, CU_MEM_HANDLE_TYPE_FABRIC);
  }
  if (result != CUDA_SUCCESS) {
    return fail(result, "cuMemImportFromShareableHandle", DeviceStep::kImport,
                fmt::format(" (a {} handle)", handle_type_name(handle.type)));
  }
  return static_cast<AllocationHandle>(allocation);
}

Result<DevicePtr> CudaDeviceMemory::reserve(uint64_t bytes) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kReserve));
  CUdeviceptr address = 0;
  CUresult result = api_->mem_address_reserve(&address, bytes, 0, 0, 0);
  if (result != CUDA_SUCCESS)
    return fail(result, "cuMemAddressReserve", DeviceStep::kReserve, fmt::format(" ({} bytes)", bytes));
  return static_cast<DevicePtr>(address);
}

Status CudaDeviceMemory::map(DevicePtr address, uint64_t bytes, AllocationHandle allocation) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kMap));
  CUresult result = api_->mem_map(address, bytes, 0, allocation, 0);
  if (result != CUDA_SUCCESS) {
    return fail(result, "cuMemMap", DeviceStep::kMap, fmt::format(" ({} bytes at {:#x})", bytes, address));
  }
  return Status::ok();
}

Status CudaDeviceMemory::set_access(DevicePtr address, uint64_t bytes) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kAccess));
  CUmemAccessDesc access;
  std::memset(&access, 0, sizeof(access));
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUresult result = api_->mem_set_access(address, bytes, &access, 1);
  if (result != CUDA_SUCCESS) {
    return fail(result, "cuMemSetAccess", DeviceStep::kAccess, fmt::format(" ({} bytes at {:#x})", bytes, address));
  }
  return Status::ok();
}

Status CudaDeviceMemory::unmap(DevicePtr address, uint64_t bytes) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kUnmap));
  CUresult result = api_->mem_unmap(address, bytes);
  if (result != CUDA_SUCCESS) return fail(result, "cuMemUnmap", DeviceStep::kUnmap);
  return Status::ok();
}

Status CudaDeviceMemory::release(AllocationHandle allocation) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kRelease));
  CUresult result = api_->mem_release(allocation);
  if (result != CUDA_SUCCESS) return fail(result, "cuMemRelease", DeviceStep::kRelease);
  return Status::ok();
}

Status CudaDeviceMemory::free_reservation(DevicePtr address, uint64_t bytes) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kFreeReservation));
  CUresult result = api_->mem_address_free(address, bytes);
  if (result != CUDA_SUCCESS) return fail(result, "cuMemAddressFree", DeviceStep::kFreeReservation);
  return Status::ok();
}

Status CudaDeviceMemory::close_fd(int fd) {
  if (::close(fd) != 0) {
    return Status(ErrorCode::kInternal, fmt::format("close(fd {}) failed: {}", fd, std::strerror(errno)),
                  ErrorContext{.step = step_of(DeviceStep::kCloseFd)});
  }
  return Status::ok();
}

Status CudaDeviceMemory::copy_to_device(DevicePtr dst, std::span<const std::byte> src) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kCopyToDevice));
  CUresult result = api_->memcpy_htod(dst, src.data(), src.size());
  if (result != CUDA_SUCCESS) return fail(result, "cuMemcpyHtoD", DeviceStep::kCopyToDevice);
  return Status::ok();
}

Status CudaDeviceMemory::copy_from_device(std::span<std::byte> dst, DevicePtr src) {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kCopyFromDevice));
  CUresult result = api_->memcpy_dtoh(dst.data(), src, dst.size());
  if (result != CUDA_SUCCESS) return fail(result, "cuMemcpyDtoH", DeviceStep::kCopyFromDevice);
  return Status::ok();
}

Status CudaDeviceMemory::synchronize() {
  ENGRAM_RETURN_IF_ERROR(make_current(DeviceStep::kSynchronize));
  CUresult result = api_->ctx_synchronize();
  if (result != CUDA_SUCCESS) return fail(result, "cuCtxSynchronize", DeviceStep::kSynchronize);
  return Status::ok();
}

}  // namespace engram::cuda
