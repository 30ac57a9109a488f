// The NVLink domain of a GPU, from NVML's fabric info: on a multi-node
// NVLink system (GB200/GB300 NVL72) every GPU of one NVLink domain reports
// the same cluster UUID and clique id once the fabric manager has registered
// it. NVML (libnvidia-ml.so.1) ships with the driver, not the toolkit, so it
// is dlopen'ed at run time like libcuda: a missing library or symbol is a
// reason string, never a link or start failure. This file needs no CUDA
// header and builds (and is tested) without a GPU.
#pragma once

#include <cstdint>
#include <string>

namespace engram::cuda {

// Our own declarations of the NVML ABI pieces we use (nvml.h is not on
// every build machine). Layouts as in nvml.h (NVML API version 12).
namespace nvml {

using Return = int;  // nvmlReturn_t, a C enum
inline constexpr Return kSuccess = 0;                   // NVML_SUCCESS
inline constexpr Return kErrorNotSupported = 3;         // NVML_ERROR_NOT_SUPPORTED
inline constexpr Return kErrorFunctionNotFound = 13;    // NVML_ERROR_FUNCTION_NOT_FOUND

using FabricState = unsigned char;  // nvmlGpuFabricState_t
inline constexpr FabricState kFabricStateNotSupported = 0;  // NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
inline constexpr FabricState kFabricStateNotStarted = 1;    // NVML_GPU_FABRIC_STATE_NOT_STARTED
inline constexpr FabricState kFabricStateInProgress = 2;    // NVML_GPU_FABRIC_STATE_IN_PROGRESS
inline constexpr FabricState kFabricStateCompleted = 3;     // NVML_GPU_FABRIC_STATE_COMPLETED

inline constexpr int kFabricUuidBytes = 16;  // NVML_GPU_FABRIC_UUID_LEN

// nvmlGpuFabricInfo_t, for nvmlDeviceGetGpuFabricInfo (drivers before the V call).
struct GpuFabricInfo {
  unsigned char cluster_uuid[kFabricUuidBytes];
  Return status;
  unsigned int clique_id;
  FabricState state;
};

// nvmlGpuFabricInfo_v2_t, for nvmlDeviceGetGpuFabricInfoV with version
// nvmlGpuFabricInfo_v2 (= sizeof | 2 << 24, as NVML_STRUCT_VERSION builds it).
struct GpuFabricInfoV2 {
  unsigned int version;
  unsigned char cluster_uuid[kFabricUuidBytes];
  Return status;
  unsigned int clique_id;
  FabricState state;
  unsigned int health_mask;
};
static_assert(sizeof(GpuFabricInfo) == 28);
static_assert(sizeof(GpuFabricInfoV2) == 36);
inline constexpr unsigned int kGpuFabricInfoV2Version =
    static_cast<unsigned int>(sizeof(GpuFabricInfoV2)) | (2u << 24);

// "NVML_ERROR_NOT_SUPPORTED" for the codes NVML documents; "nvmlReturn_t N"
// for others.
std::string return_name(Return code);

}  // namespace nvml

// A GPU's NVLink domain, or why it has none.
struct NvlinkDomain {
  std::string domain;  // "<32 hex digits of clusterUuid>/<cliqueId>"; "" when none
  std::string reason;  // why `domain` is empty; "" when it is set
};

// Pure: the domain from fabric info fields. Set only when state is
// COMPLETED, status is NVML_SUCCESS and the cluster UUID is not all zero (a
// zero UUID would make every such GPU look like one domain).
NvlinkDomain domain_from_fabric_info(const unsigned char (&cluster_uuid)[nvml::kFabricUuidBytes],
                                     nvml::Return status, unsigned int clique_id, nvml::FabricState state);
NvlinkDomain domain_from_fabric_info(const nvml::GpuFabricInfoV2& info);

// The NVLink domain of the GPU at `pci_bus_id` ("0000:3b:00.0", as
// cuDeviceGetPCIBusId writes it), asking NVML loaded from `library`. Never
// fails: a missing library or symbol, an NVML error, or a GPU outside any
// fabric gives an empty domain and the reason. The default library is
// loaded and initialized once per process and never unloaded.
NvlinkDomain nvlink_domain_for_pci_bus_id(const std::string& pci_bus_id,
                                          const char* library = "libnvidia-ml.so.1");

}  // namespace engram::cuda
