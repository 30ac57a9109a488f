#include "backends/cuda/cuda_driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

namespace engram::cuda {
namespace {

// cuda.h maps names such as cuMemGetInfo to their current ABI version
// (cuMemGetInfo_v2); expanding before stringifying looks up that symbol.
#define ENGRAM_CU_STR2(x) #x
#define ENGRAM_CU_STR(x) ENGRAM_CU_STR2(x)
#define ENGRAM_CU_LOAD(field, symbol)                                                         \
  do {                                                                                        \
    api.field = reinterpret_cast<decltype(api.field)>(dlsym(library, ENGRAM_CU_STR(symbol))); \
    if (api.field == nullptr) missing = ENGRAM_CU_STR(symbol);                                \
  } while (0)

struct Loaded {
  DriverApi api;
  Status status;
};

Loaded load() {
  Loaded out;
  // Never dlclose: the driver stays loaded for the life of the process, as
  // cudart and NCCL also keep it.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    const char* why = dlerror();
    out.status = failed_precondition(fmt::format(
        "no CUDA driver: dlopen(libcuda.so.1) failed ({}); install the NVIDIA driver or run on a GPU machine",
        why ? why : "unknown"));
    return out;
  }
  DriverApi& api = out.api;
  std::string missing;
  ENGRAM_CU_LOAD(init, cuInit);
  ENGRAM_CU_LOAD(get_error_name, cuGetErrorName);
  ENGRAM_CU_LOAD(get_error_string, cuGetErrorString);
  ENGRAM_CU_LOAD(driver_get_version, cuDriverGetVersion);
  ENGRAM_CU_LOAD(device_get_count, cuDeviceGetCount);
  ENGRAM_CU_LOAD(device_get, cuDeviceGet);
  ENGRAM_CU_LOAD(device_get_name, cuDeviceGetName);
  ENGRAM_CU_LOAD(device_total_mem, cuDeviceTotalMem);
  ENGRAM_CU_LOAD(device_get_attribute, cuDeviceGetAttribute);
  ENGRAM_CU_LOAD(device_can_access_peer, cuDeviceCanAccessPeer);
  ENGRAM_CU_LOAD(device_get_pci_bus_id, cuDeviceGetPCIBusId);
  ENGRAM_CU_LOAD(primary_ctx_retain, cuDevicePrimaryCtxRetain);
  ENGRAM_CU_LOAD(primary_ctx_release, cuDevicePrimaryCtxRelease);
  ENGRAM_CU_LOAD(ctx_set_current, cuCtxSetCurrent);
  ENGRAM_CU_LOAD(ctx_synchronize, cuCtxSynchronize);
  ENGRAM_CU_LOAD(mem_get_info, cuMemGetInfo);
  ENGRAM_CU_LOAD(mem_get_allocation_granularity, cuMemGetAllocationGranularity);
  ENGRAM_CU_LOAD(mem_create, cuMemCreate);
  ENGRAM_CU_LOAD(mem_release, cuMemRelease);
  ENGRAM_CU_LOAD(mem_export_to_shareable_handle, cuMemExportToShareableHandle);
  ENGRAM_CU_LOAD(mem_import_from_shareable_handle, cuMemImportFromShareableHandle);
  ENGRAM_CU_LOAD(mem_address_reserve, cuMemAddressReserve);
  ENGRAM_CU_LOAD(mem_address_free, cuMemAddressFree);
  ENGRAM_CU_LOAD(mem_map, cuMemMap);
  ENGRAM_CU_LOAD(mem_unmap, cuMemUnmap);
  ENGRAM_CU_LOAD(mem_set_access, cuMemSetAccess);
  ENGRAM_CU_LOAD(memcpy_htod, cuMemcpyHtoD);
  ENGRAM_CU_LOAD(memcpy_dtoh, cuMemcpyDtoH);
  if (!missing.empty()) {
    out.status = failed_precondition(fmt::format(
        "CUDA driver libcuda.so.1 lacks symbol {}: the driver is older than this build needs (CUDA 12+)", missing));
    return out;
  }
  CUresult result = api.init(0);
  if (result != CUDA_SUCCESS) {
    out.status = cu_status(result, "cuInit", -1, "init");
    // cu_status needs the loaded table for names; it is filled by now.
  }
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

#undef ENGRAM_CU_LOAD
#undef ENGRAM_CU_STR
#undef ENGRAM_CU_STR2

}  // namespace

Result<const DriverApi*> driver_api() {
  const Loaded& l = loaded();
  if (!l.status.is_ok()) return l.status;
  return &l.api;
}

std::string cu_error_text(CUresult result) {
  // The table may be half-built while load() reports cuInit's failure, but the
  // name functions are loaded before cuInit runs.
  static std::once_flag once;
  static void* library = nullptr;
  std::call_once(once, [] { library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD); });
  const char* name = nullptr;
  const char* text = nullptr;
  if (library != nullptr) {
    auto get_name = reinterpret_cast<decltype(&::cuGetErrorName)>(dlsym(library, "cuGetErrorName"));
    auto get_string = reinterpret_cast<decltype(&::cuGetErrorString)>(dlsym(library, "cuGetErrorString"));
    if (get_name) get_name(result, &name);
    if (get_string) get_string(result, &text);
  }
  if (name == nullptr) return fmt::format("CUresult {}", static_cast<int>(result));
  if (text == nullptr) return name;
  return fmt::format("{} ({})", name, text);
}

ErrorCode error_code_for(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS: return ErrorCode::kOk;
    case CUDA_ERROR_NOT_PERMITTED: return ErrorCode::kPermissionDenied;
    case CUDA_ERROR_OUT_OF_MEMORY: return ErrorCode::kResourceExhausted;
    case CUDA_ERROR_TOO_MANY_PEERS: return ErrorCode::kResourceExhausted;
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
      return ErrorCode::kFailedPrecondition;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
      return ErrorCode::kInvalidArgument;
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_FILE_NOT_FOUND:
      return ErrorCode::kNotFound;
    case CUDA_ERROR_ALREADY_MAPPED:
    case CUDA_ERROR_ALREADY_ACQUIRED:
      return ErrorCode::kAlreadyExists;
    case CUDA_ERROR_TIMEOUT: return ErrorCode::kDeadlineExceeded;
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
      return ErrorCode::kUnavailable;
    default: return ErrorCode::kInternal;
  }
}

Status cu_status(CUresult result, const char* call, int ordinal, const std::string& step,
                 const std::string& detail) {
  ENGRAM_CHECK(result != CUDA_SUCCESS);
  std::string where = ordinal >= 0 ? fmt::format(" on GPU {}", ordinal) : std::string();
  return Status(error_code_for(result),
                fmt::format("{} failed{}: {}{}", call, where, cu_error_text(result), detail),
                ErrorContext{.rank = -1, .peer = -1, .step = step});
}

GpuPresence gpu_presence() {
  GpuPresence presence;
  auto api = driver_api();
  if (!api.is_ok()) {
    presence.reason = api.status().message();
    return presence;
  }
  int count = 0;
  CUresult result = (*api)->device_get_count(&count);
  if (result != CUDA_SUCCESS) {
    presence.reason = "cuDeviceGetCount failed: " + cu_error_text(result);
    return presence;
  }
  presence.count = count;
  if (count == 0) presence.reason = "the CUDA driver reports 0 devices";
  return presence;
}

Result<std::string> pci_bus_id(int ordinal) {
  ENGRAM_ASSIGN_OR_RETURN(const DriverApi* api, driver_api());
  CUdevice device = 0;
  CUresult result = api->device_get(&device, ordinal);
  if (result != CUDA_SUCCESS) return cu_status(result, "cuDeviceGet", ordinal, "pci bus id");
  char text[32] = {};  // "dddd:bb:dd.f" plus NUL; the driver documents 13 bytes as enough
  result = api->device_get_pci_bus_id(text, static_cast<int>(sizeof text), device);
  if (result != CUDA_SUCCESS) return cu_status(result, "cuDeviceGetPCIBusId", ordinal, "pci bus id");
  return std::string(text);
}

std::optional<EmulatedHost> emulated_host() {
  if (!driver_api().is_ok()) return std::nullopt;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return std::nullopt;
  using HostFn = int (*)(char*, size_t, char*, size_t, int*);
  auto host = reinterpret_cast<HostFn>(dlsym(library, "engramlabEmulatedHost"));
  dlclose(library);  // NOLOAD took a reference; the driver stays loaded
  char name[256] = {};
  char boot_id[256] = {};
  int imex = 0;
  if (host == nullptr || host(name, sizeof name, boot_id, sizeof boot_id, &imex) == 0) return std::nullopt;
  return EmulatedHost{.hostname = name, .boot_id = boot_id, .imex_channel = imex != 0};
}

Result<bool> can_access_peer(int from_ordinal, int to_ordinal) {
  ENGRAM_ASSIGN_OR_RETURN(const DriverApi* api, driver_api());
  CUdevice from = 0;
  CUdevice to = 0;
  CUresult result = api->device_get(&from, from_ordinal);
  if (result != CUDA_SUCCESS) return cu_status(result, "cuDeviceGet", from_ordinal, "peer access");
  result = api->device_get(&to, to_ordinal);
  if (result != CUDA_SUCCESS) return cu_status(result, "cuDeviceGet", to_ordinal, "peer access");
  int can = 0;
  result = api->device_can_access_peer(&can, from, to);
  if (result != CUDA_SUCCESS) {
    return cu_status(result, "cuDeviceCanAccessPeer", from_ordinal, "peer access",
                     fmt::format(" (peer GPU {})", to_ordinal));
  }
  return can != 0;
}

}  // namespace engram::cuda
