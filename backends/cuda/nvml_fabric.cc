#include "backends/cuda/nvml_fabric.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>

namespace engram::cuda {
namespace nvml {

std::string return_name(Return code) {
  static constexpr const char* kNames[] = {
      "NVML_SUCCESS",
      "NVML_ERROR_UNINITIALIZED",
      "NVML_ERROR_INVALID_ARGUMENT",
      "NVML_ERROR_NOT_SUPPORTED",
      "NVML_ERROR_NO_PERMISSION",
      "NVML_ERROR_ALREADY_INITIALIZED",
      "NVML_ERROR_NOT_FOUND",
      "NVML_ERROR_INSUFFICIENT_SIZE",
      "NVML_ERROR_INSUFFICIENT_POWER",
      "NVML_ERROR_DRIVER_NOT_LOADED",
      "NVML_ERROR_TIMEOUT",
      "NVML_ERROR_IRQ_ISSUE",
      "NVML_ERROR_LIBRARY_NOT_FOUND",
      "NVML_ERROR_FUNCTION_NOT_FOUND",
      "NVML_ERROR_CORRUPTED_INFOROM",
      "NVML_ERROR_GPU_IS_LOST",
      "NVML_ERROR_RESET_REQUIRED",
      "NVML_ERROR_OPERATING_SYSTEM",
      "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
      "NVML_ERROR_IN_USE",
      "NVML_ERROR_MEMORY",
      "NVML_ERROR_NO_DATA",
      "NVML_ERROR_VGPU_ECC_NOT_ENABLED",
      "NVML_ERROR_INSUFFICIENT_RESOURCES",
      "NVML_ERROR_FREQ_NOT_SUPPORTED",
      "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
  };
  if (code >= 0 && code < static_cast<Return>(std::size(kNames))) return kNames[code];
  if (code == 999) return "NVML_ERROR_UNKNOWN";
  return fmt::format("nvmlReturn_t {}", code);
}

}  // namespace nvml

namespace {

const char* state_name(nvml::FabricState state) {
  switch (state) {
    case nvml::kFabricStateNotSupported: return "NOT_SUPPORTED";
    case nvml::kFabricStateNotStarted: return "NOT_STARTED";
    case nvml::kFabricStateInProgress: return "IN_PROGRESS";
    case nvml::kFabricStateCompleted: return "COMPLETED";
    default: return "unknown";
  }
}

using Device = void*;  // nvmlDevice_t, an opaque pointer
using InitFn = nvml::Return (*)();
using HandleByPciBusIdFn = nvml::Return (*)(const char*, Device*);
using FabricInfoVFn = nvml::Return (*)(Device, nvml::GpuFabricInfoV2*);
using FabricInfoFn = nvml::Return (*)(Device, nvml::GpuFabricInfo*);

// One library, loaded and nvmlInit_v2'ed once; `reason` set when unusable.
struct Library {
  HandleByPciBusIdFn handle_by_pci_bus_id = nullptr;
  FabricInfoVFn fabric_info_v = nullptr;  // drivers R550+
  FabricInfoFn fabric_info = nullptr;     // older drivers; the V call supersedes it
  std::string reason;
};

Library load(const char* name) {
  Library lib;
  // Never dlclose: NVML keeps its init reference for the life of the
  // process, as NCCL also does.
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    lib.reason = fmt::format("NVML not available: dlopen({}) failed ({}); it ships with the NVIDIA driver", name,
                             why ? why : "unknown");
    return lib;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(handle, "nvmlInit_v2"));
  lib.handle_by_pci_bus_id = reinterpret_cast<HandleByPciBusIdFn>(dlsym(handle, "nvmlDeviceGetHandleByPciBusId_v2"));
  lib.fabric_info_v = reinterpret_cast<FabricInfoVFn>(dlsym(handle, "nvmlDeviceGetGpuFabricInfoV"));
  lib.fabric_info = reinterpret_cast<FabricInfoFn>(dlsym(handle, "nvmlDeviceGetGpuFabricInfo"));
  const char* missing = init == nullptr                                              ? "nvmlInit_v2"
                        : lib.handle_by_pci_bus_id == nullptr                          ? "nvmlDeviceGetHandleByPciBusId_v2"
                        : (lib.fabric_info_v == nullptr && lib.fabric_info == nullptr) ? "nvmlDeviceGetGpuFabricInfoV"
                                                                                       : nullptr;
  if (missing != nullptr) {
    lib.reason = fmt::format("NVML in {} lacks symbol {}: the driver predates GPU fabric info (R530+ needed)", name,
                             missing);
    return lib;
  }
  const nvml::Return r = init();
  if (r != nvml::kSuccess) lib.reason = fmt::format("nvmlInit_v2 failed: {}", nvml::return_name(r));
  return lib;
}

const Library& library_named(const char* name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Library>> loaded;
  std::lock_guard lock(mutex);
  auto& slot = loaded[name];
  if (!slot) slot = std::make_unique<Library>(load(name));
  return *slot;
}

}  // namespace

NvlinkDomain domain_from_fabric_info(const unsigned char (&cluster_uuid)[nvml::kFabricUuidBytes],
                                     nvml::Return status, unsigned int clique_id, nvml::FabricState state) {
  NvlinkDomain out;
  if (state != nvml::kFabricStateCompleted) {
    out.reason = state == nvml::kFabricStateNotSupported
                     ? "GPU fabric state NOT_SUPPORTED: this GPU is in no multi-node NVLink fabric"
                     : fmt::format("GPU fabric registration not complete (state {}, code {}): is the NVIDIA fabric "
                                   "manager running?",
                                   state_name(state), static_cast<int>(state));
    return out;
  }
  if (status != nvml::kSuccess) {
    out.reason = fmt::format("GPU fabric registration completed with error {}", nvml::return_name(status));
    return out;
  }
  std::string hex;
  bool all_zero = true;
  for (unsigned char byte : cluster_uuid) {
    hex += fmt::format("{:02x}", byte);
    all_zero &= byte == 0;
  }
  if (all_zero) {
    out.reason = "GPU fabric registration completed but the cluster UUID is all zero";
    return out;
  }
  out.domain = fmt::format("{}/{}", hex, clique_id);
  return out;
}

NvlinkDomain domain_from_fabric_info(const nvml::GpuFabricInfoV2& info) {
  return domain_from_fabric_info(info.cluster_uuid, info.status, info.clique_id, info.state);
}

NvlinkDomain nvlink_domain_for_pci_bus_id(const std::string& pci_bus_id, const char* library) {
  const Library& lib = library_named(library);
  if (!lib.reason.empty()) return {.domain = "", .reason = lib.reason};
  Device device = nullptr;
  nvml::Return r = lib.handle_by_pci_bus_id(pci_bus_id.c_str(), &device);
  if (r != nvml::kSuccess)
    return {.domain = "",
            .reason = fmt::format("nvmlDeviceGetHandleByPciBusId_v2({}) failed: {}", pci_bus_id, nvml::return_name(r))};
  nvml::GpuFabricInfoV2 info{};
  const char* call = "nvmlDeviceGetGpuFabricInfoV";
  if (lib.fabric_info_v != nullptr) {
    info.version = nvml::kGpuFabricInfoV2Version;
    r = lib.fabric_info_v(device, &info);
  } else {
    call = "nvmlDeviceGetGpuFabricInfo";
    nvml::GpuFabricInfo v1{};
    r = lib.fabric_info(device, &v1);
    std::copy(std::begin(v1.cluster_uuid), std::end(v1.cluster_uuid), info.cluster_uuid);
    info.status = v1.status;
    info.clique_id = v1.clique_id;
    info.state = v1.state;
  }
  if (r == nvml::kErrorNotSupported)
    return {.domain = "",
            .reason = fmt::format("{} on GPU {}: NVML_ERROR_NOT_SUPPORTED (no multi-node NVLink fabric here)", call,
                                  pci_bus_id)};
  if (r != nvml::kSuccess)
    return {.domain = "", .reason = fmt::format("{} on GPU {} failed: {}", call, pci_bus_id, nvml::return_name(r))};
  NvlinkDomain out = domain_from_fabric_info(info);
  if (out.domain.empty()) out.reason = fmt::format("GPU {}: {}", pci_bus_id, out.reason);
  return out;
}

}  // namespace engram::cuda
