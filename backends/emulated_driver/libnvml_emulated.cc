// The emulated NVML (libnvidia-ml.so.1): the device and fabric queries
// `doctor` and backends/cuda/nvml_fabric.cc make, answered from the world
// file. A GPU of a host in an NVLink domain reports fabric state COMPLETED
// with a cluster UUID derived from the domain's name and clique id 1, so
// every GPU of one domain reports the same pair (what the fabric manager
// gives a real NVL72 rack); a GPU outside any domain reports NOT_SUPPORTED.
// Layouts as backends/cuda/nvml_fabric.h declares them (NVML API 12).
#include <cstdio>
#include <cstring>
#include <string>

#include "backends/cuda/nvml_fabric.h"
#include "backends/emulated_driver/emulated_process.h"

using engram::emulated::Process;
using engram::emulated::process;
namespace nvml = engram::cuda::nvml;

namespace {

constexpr nvml::Return kUninitialized = 1;     // NVML_ERROR_UNINITIALIZED
constexpr nvml::Return kInvalidArgument = 2;   // NVML_ERROR_INVALID_ARGUMENT
constexpr nvml::Return kNotFound = 6;          // NVML_ERROR_NOT_FOUND
constexpr nvml::Return kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
constexpr nvml::Return kDriverNotLoaded = 9;   // NVML_ERROR_DRIVER_NOT_LOADED
constexpr nvml::Return kVersionMismatch = 25;  // NVML_ERROR_ARGUMENT_VERSION_MISMATCH

// A device handle: GPU index on this host + 1 (never 0, never dereferenced).
using Device = void*;
int gpu_of(Device d) { return static_cast<int>(reinterpret_cast<uintptr_t>(d)) - 1; }
Device device_of(int gpu) { return reinterpret_cast<Device>(static_cast<uintptr_t>(gpu + 1)); }

bool valid(const Process& p, Device d) { return p.ready && gpu_of(d) >= 0 && gpu_of(d) < p.my_host().gpus; }

}  // namespace

extern "C" {

nvml::Return nvmlInit_v2() {
  if (!process().ready) {
    engram::emulated::say("NVML not initialised: " + process().error);
    return kDriverNotLoaded;
  }
  return nvml::kSuccess;
}
nvml::Return nvmlInit() { return nvmlInit_v2(); }
nvml::Return nvmlShutdown() { return nvml::kSuccess; }

const char* nvmlErrorString(nvml::Return code) {
  switch (code) {
    case nvml::kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case nvml::kErrorNotSupported: return "Not Supported";
    case kNotFound: return "Not Found";
    case kInsufficientSize: return "Insufficient Size";
    case kDriverNotLoaded: return "Driver Not Loaded";
    case kVersionMismatch: return "Argument Version Mismatch";
    default: return "Unknown Error";
  }
}

nvml::Return nvmlDeviceGetCount_v2(unsigned int* count) {
  const Process& p = process();
  if (!p.ready) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  // NVML ignores CUDA_VISIBLE_DEVICES: every GPU of the host.
  *count = static_cast<unsigned int>(p.my_host().gpus);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetHandleByIndex_v2(unsigned int index, Device* device) {
  const Process& p = process();
  if (!p.ready) return kUninitialized;
  if (device == nullptr || index >= static_cast<unsigned int>(p.my_host().gpus)) return kInvalidArgument;
  *device = device_of(static_cast<int>(index));
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, Device* device) {
  const Process& p = process();
  if (!p.ready) return kUninitialized;
  if (bus_id == nullptr || device == nullptr) return kInvalidArgument;
  // "0000:12:00.0" or NVML's own "00000000:12:00.0", any case.
  unsigned domain = 0, bus = 0, slot = 0, function = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4) return kInvalidArgument;
  const int gpu = static_cast<int>(bus) - 0x10;
  if (domain != 0 || slot != 0 || function != 0 || gpu < 0 || gpu >= p.my_host().gpus) return kNotFound;
  *device = device_of(gpu);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetName(Device device, char* name, unsigned int length) {
  const Process& p = process();
  if (!valid(p, device) || name == nullptr) return kInvalidArgument;
  const std::string text = "NVIDIA " + p.my_host().model;
  if (text.size() + 1 > length) return kInsufficientSize;
  std::memcpy(name, text.c_str(), text.size() + 1);
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetGpuFabricInfoV(Device device, nvml::GpuFabricInfoV2* info) {
  const Process& p = process();
  if (!valid(p, device) || info == nullptr) return kInvalidArgument;
  if (info->version != nvml::kGpuFabricInfoV2Version) return kVersionMismatch;
  const std::string& domain = p.my_host().domain;
  std::memset(info->cluster_uuid, 0, sizeof info->cluster_uuid);
  info->status = nvml::kSuccess;
  info->clique_id = 0;
  info->health_mask = 0;
  if (domain.empty()) {
    info->state = nvml::kFabricStateNotSupported;
    return nvml::kSuccess;
  }
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : domain) h = (h ^ c) * 1099511628211ull;
  for (int i = 0; i < nvml::kFabricUuidBytes; ++i) {
    h = (h ^ static_cast<uint64_t>(i + 1)) * 1099511628211ull;
    info->cluster_uuid[i] = static_cast<unsigned char>((h >> 56) | 1);  // never all zero
  }
  info->clique_id = 1;
  info->state = nvml::kFabricStateCompleted;
  return nvml::kSuccess;
}

nvml::Return nvmlDeviceGetGpuFabricInfo(Device device, nvml::GpuFabricInfo* info) {
  if (info == nullptr) return kInvalidArgument;
  nvml::GpuFabricInfoV2 v2{};
  v2.version = nvml::kGpuFabricInfoV2Version;
  const nvml::Return r = nvmlDeviceGetGpuFabricInfoV(device, &v2);
  if (r != nvml::kSuccess) return r;
  std::memcpy(info->cluster_uuid, v2.cluster_uuid, sizeof info->cluster_uuid);
  info->status = v2.status;
  info->clique_id = v2.clique_id;
  info->state = v2.state;
  return nvml::kSuccess;
}

}  // extern "C"
