// Which VMM request the world refuses, and with which driver code: written
// once for the emulator (sim/sim_device_memory.cc) and the emulated driver
// (backends/emulated_driver/), so both answer alike. Header-only and free of
// engramlab types beyond the standard library: the emulated libcuda.so.1 is a
// position-independent library built without core.
#pragma once

#include <optional>
#include <string>

namespace engram::vmm_rules {

// A refusal: the CUresult's name ("CUDA_ERROR_NOT_PERMITTED") and why, in
// words that name the call, the host and the fix.
struct Refusal {
  const char* cu_error = "";
  std::string why;
};

// What a host tells about FABRIC handles.
struct FabricHost {
  std::string name;        // host name
  std::string where;       // "rank 3 (gpu 1 of gb300-0)" or the host name
  std::string gpu_model;   // "H200"
  bool fabric_attribute = false;
  bool imex_channel = false;
};

// cuMemCreate / cuMemImportFromShareableHandle with FABRIC on `host`.
// - attribute 0: CUDA_ERROR_NOT_SUPPORTED;
// - attribute set, no IMEX channel: CUDA_ERROR_NOT_PERMITTED, measured on
//   one H200 VM (the seed's probe).
// The import side is documented: "If shHandleType is CU_MEM_HANDLE_TYPE_FABRIC
// and the importer process has not been granted access to the same IMEX
// channel as the exporter process, this API will error as
// CUDA_ERROR_NOT_PERMITTED" (cuda.h 13.0, cuMemImportFromShareableHandle).
// NCCL expects exactly these two from a FABRIC cuMemCreate and retries
// without FABRIC on either (NVIDIA/nccl, src/allocator.cc L53-68,
// tag v2.28.9-1, merged).
inline std::optional<Refusal> fabric_refusal(const FabricHost& host, const std::string& call) {
  if (!host.fabric_attribute)
    return Refusal{"CUDA_ERROR_NOT_SUPPORTED",
                   call + ": " + host.where + " (" + host.gpu_model +
                       ") does not support FABRIC handles (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0)"};
  if (!host.imex_channel)
    return Refusal{"CUDA_ERROR_NOT_PERMITTED",
                   call + ": no IMEX channel on host " + host.name +
                       " (/dev/nvidia-caps-imex-channels/channel0 is missing) although the device reports FABRIC "
                       "support: start nvidia-imex and expose the channel to the container"};
  return std::nullopt;
}

// cuMemImportFromShareableHandle(FABRIC) on `host`: the importer's own
// capability. Without an IMEX channel the import answers
// CUDA_ERROR_NOT_SUPPORTED, not the NOT_PERMITTED a create gets: measured on
// the H200 VM's driver (CUDA 13, 2026-12-05,
// tests/gpu/emulated_driver_agreement_test.cc). The channel a peer's handle
// came through is fabric_import_refusal's question.
inline std::optional<Refusal> fabric_import_capability_refusal(const FabricHost& host, const std::string& call) {
  std::optional<Refusal> refused = fabric_refusal(host, call);
  if (refused && host.fabric_attribute && !host.imex_channel) refused->cu_error = "CUDA_ERROR_NOT_SUPPORTED";
  return refused;
}

// Importing a FABRIC handle whose memory lives on `owner_host` (domain
// `owner_domain`) from `importer_host` (domain `importer_domain`): one
// machine, or one non-empty NVLink/IMEX domain, or CUDA_ERROR_NOT_PERMITTED
// (the IMEX daemon refuses imports from outside its domain; NVIDIA's IMEX
// guide, "IMEX domains", and the field reports DESIGN.md section 5 lists).
inline std::optional<Refusal> fabric_import_refusal(const std::string& owner_host, const std::string& owner_domain,
                                                    const std::string& importer_host,
                                                    const std::string& importer_domain, bool same_machine) {
  if (same_machine || (!owner_domain.empty() && owner_domain == importer_domain)) return std::nullopt;
  return Refusal{"CUDA_ERROR_NOT_PERMITTED",
                 "cuMemImportFromShareableHandle(FABRIC): the allocation lives on host " + owner_host +
                     " in NVLink/IMEX domain '" + owner_domain + "', this rank runs on host " + importer_host +
                     " in domain '" + importer_domain + "': fabric handles import only within one IMEX domain"};
}

// The code an injected fault at a VMM site answers with (sim/faults.h's
// sites): what the driver returns when that step fails for want of a
// resource (export, map: OUT_OF_MEMORY), a refused peer (import:
// NOT_PERMITTED) or a device the process cannot name (access: INVALID_DEVICE).
inline const char* injected_fault_error(const std::string& site) {
  if (site == "import") return "CUDA_ERROR_NOT_PERMITTED";
  if (site == "access") return "CUDA_ERROR_INVALID_DEVICE";
  return "CUDA_ERROR_OUT_OF_MEMORY";  // create, export, map
}

}  // namespace engram::vmm_rules
