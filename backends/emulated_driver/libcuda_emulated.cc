// The emulated CUDA driver (libcuda.so.1): the driver calls backends/cuda
// makes (cuda_driver.cc's table) plus what another program needs for the same
// VMM sequence, over host memory:
//   cuMemCreate            -> a memfd of the size (sparse: only written pages cost)
//   cuMemAddressReserve    -> a PROT_NONE anonymous mapping
//   cuMemMap               -> mmap MAP_FIXED|MAP_SHARED of the memfd, still PROT_NONE
//   cuMemSetAccess         -> mprotect, so a mapped "device pointer" is readable by the CPU
//   cuMemUnmap             -> the range back to PROT_NONE anonymous memory
//   POSIX fd export/import -> dup of the memfd (refused across emulated hosts)
//   FABRIC export/import   -> 64 bytes resolved by the emulated IMEX service (imex_service.h)
// Each refusal returns the code the real driver returns, from one table of
// world rules shared with the emulator (core/backend/vmm_world_rules.h);
// argument checks follow the driver API reference of each call (CUDA 13.0
// cuda.h, "Virtual Memory Management"). Kernels, streams, modules and the
// rest are refused (refused_calls.cc).
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include "backends/emulated_driver/emulated_process.h"
#include "backends/emulated_driver/imex_service.h"
#include "core/backend/vmm_world_rules.h"

namespace engram::emulated {
namespace {

struct ErrorName {
  CUresult code;
  const char* name;
  const char* text;
};
// Names and texts as the real driver's cuGetErrorName / cuGetErrorString give them.
constexpr ErrorName kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

CUresult code_named(const char* name) {
  for (const ErrorName& e : kErrors)
    if (std::strcmp(e.name, name) == 0) return e.code;
  return CUDA_ERROR_UNKNOWN;
}

struct Allocation {
  int fd = -1;  // the memfd; one descriptor per handle keeps the ledger true
  uint64_t bytes = 0;
  int host = -1;
  int gpu = -1;
  unsigned types = 0;  // CUmemAllocationHandleType bits it may be exported as
  uint64_t export_id = 0;  // FABRIC registration, 0 when none
};
struct Mapping {
  uint64_t bytes = 0;
  int fd = -1;  // a descriptor per mapping: the memory lives while mapped
  uint64_t offset = 0;
  Allocation meta;  // what cuMemRetainAllocationHandle / properties answer
  unsigned long long access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
};

struct State {
  std::mutex mutex;
  bool initialized = false;
  std::map<CUmemGenericAllocationHandle, Allocation> allocations;
  std::map<CUdeviceptr, uint64_t> reservations;  // start -> bytes
  std::map<CUdeviceptr, Mapping> mappings;       // start -> mapping
  CUmemGenericAllocationHandle next_handle = 0x10000;
  CUcontext current = nullptr;
};
State& state() {
  static State* s = new State;  // never destroyed: the IMEX thread may outlive static destruction
  return *s;
}

// The ready process, or why not (said once).
CUresult not_ready() {
  static std::once_flag once;
  std::call_once(once, [] { say("not initialised: " + process().error); });
  return CUDA_ERROR_NOT_INITIALIZED;
}

#define ENGRAM_EMU_READY()                                              \
  const Process& p = process();                                        \
  if (!p.ready || !state().initialized) return not_ready();            \
  (void)p

// A refusal with words on stderr (the driver returns only a code; the
// words say which rule refused, for a person reading the rank's output).
CUresult refuse(const char* cu_error, const std::string& why) {
  say(std::string(cu_error) + ": " + why);
  return code_named(cu_error);
}

int gpu_of_ordinal(const Process& p, int ordinal) {
  if (ordinal < 0 || ordinal >= static_cast<int>(p.visible.size())) return -1;
  return p.visible[static_cast<size_t>(ordinal)];
}

vmm_rules::FabricHost fabric_host_of(const Process& p) {
  const WorldHost& h = p.my_host();
  return {.name = h.name, .where = p.where(), .gpu_model = h.model, .fabric_attribute = h.fabric,
          .imex_channel = h.imex};
}

bool inside_reservation(const State& s, CUdeviceptr ptr, uint64_t bytes) {
  auto r = s.reservations.upper_bound(ptr);
  if (r == s.reservations.begin()) return false;
  --r;
  return ptr >= r->first && ptr + bytes <= r->first + r->second;
}

// Every byte of [ptr, ptr + bytes) covered by mappings; their starts in order.
bool covered_by_mappings(State& s, CUdeviceptr ptr, uint64_t bytes, std::vector<CUdeviceptr>* starts) {
  CUdeviceptr cursor = ptr;
  while (cursor < ptr + bytes) {
    auto it = s.mappings.upper_bound(cursor);
    if (it == s.mappings.begin()) return false;
    --it;
    if (it->first + it->second.bytes <= cursor) return false;
    if (starts) starts->push_back(it->first);
    cursor = it->first + it->second.bytes;
  }
  return true;
}

unsigned long long mapped_access(State& s, CUdeviceptr ptr, uint64_t bytes) {
  std::vector<CUdeviceptr> starts;
  if (bytes == 0 || !covered_by_mappings(s, ptr, bytes, &starts)) return CU_MEM_ACCESS_FLAGS_PROT_NONE;
  unsigned long long least = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (CUdeviceptr m : starts) least = std::min(least, s.mappings[m].access);
  return least;
}

CUmemGenericAllocationHandle add_allocation(State& s, const Allocation& a) {
  const CUmemGenericAllocationHandle h = s.next_handle++;
  s.allocations[h] = a;
  return h;
}

}  // namespace
}  // namespace engram::emulated

using namespace engram::emulated;

extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const Process& p = process();
  if (!p.ready) return not_ready();
  std::lock_guard lock(state().mutex);
  state().initialized = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorName& e : kErrors)
    if (e.code == error) {
      *name = e.name;
      return CUDA_SUCCESS;
    }
  *name = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorName& e : kErrors)
    if (e.code == error) {
      *text = e.text;
      return CUDA_SUCCESS;
    }
  *text = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  ENGRAM_EMU_READY();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(p.visible.size());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  ENGRAM_EMU_READY();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (gpu_of_ordinal(p, ordinal) < 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int length, CUdevice device) {
  ENGRAM_EMU_READY();
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (gpu_of_ordinal(p, device) < 0) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(length), "NVIDIA %s", p.my_host().model.c_str());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice device) {
  ENGRAM_EMU_READY();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (gpu_of_ordinal(p, device) < 0) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = p.my_host().memory_bytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  ENGRAM_EMU_READY();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int gpu = gpu_of_ordinal(p, device);
  if (gpu < 0) return CUDA_ERROR_INVALID_DEVICE;
  // Stable per (host, GPU): the same GPU has the same UUID in every process.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : p.my_host().name + "/" + p.my_host().boot_id + "/" + std::to_string(gpu))
    h = (h ^ c) * 1099511628211ull;
  for (int i = 0; i < 16; ++i) {
    h = (h ^ static_cast<uint64_t>(i)) * 1099511628211ull;
    uuid->bytes[i] = static_cast<char>(h >> 56);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  ENGRAM_EMU_READY();
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (gpu_of_ordinal(p, device) < 0) return CUDA_ERROR_INVALID_DEVICE;
  const WorldHost& h = p.my_host();
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *value = h.posix ? 1 : 0; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: *value = h.fabric ? 1 : 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x10 + gpu_of_ordinal(p, device); break;
    default:
      say("cuDeviceGetAttribute(" + std::to_string(static_cast<int>(attribute)) +
          ") is not emulated: only VMM, handle-type, addressing and PCI attributes are");
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int* can, CUdevice device, CUdevice peer) {
  ENGRAM_EMU_READY();
  if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (gpu_of_ordinal(p, device) < 0 || gpu_of_ordinal(p, peer) < 0) return CUDA_ERROR_INVALID_DEVICE;
  *can = device != peer ? 1 : 0;  // the GPUs of one emulated host are NVLink-connected
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char* bus_id, int length, CUdevice device) {
  ENGRAM_EMU_READY();
  if (bus_id == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  const int gpu = gpu_of_ordinal(p, device);
  if (gpu < 0) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus_id, static_cast<size_t>(length), "0000:%02x:00.0", 0x10 + gpu);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  ENGRAM_EMU_READY();
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (gpu_of_ordinal(p, device) < 0) return CUDA_ERROR_INVALID_DEVICE;
  // A token per device, never dereferenced.
  *context = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(0x1000 + device));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) {
  ENGRAM_EMU_READY();
  return gpu_of_ordinal(p, device) < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
  ENGRAM_EMU_READY();
  const uintptr_t token = reinterpret_cast<uintptr_t>(context);
  if (context != nullptr && (token < 0x1000 || gpu_of_ordinal(p, static_cast<int>(token - 0x1000)) < 0))
    return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard lock(state().mutex);
  state().current = context;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* context) {
  ENGRAM_EMU_READY();
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(state().mutex);
  *context = state().current;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize() {
  ENGRAM_EMU_READY();
  return CUDA_SUCCESS;  // nothing runs asynchronously here
}

CUresult CUDAAPI cuMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  ENGRAM_EMU_READY();
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext current = nullptr;
  {
    std::lock_guard lock(state().mutex);
    current = state().current;
  }
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const int gpu = gpu_of_ordinal(p, static_cast<int>(reinterpret_cast<uintptr_t>(current) - 0x1000));
  const uint64_t total = p.my_host().memory_bytes;
  const uint64_t used = used_bytes(p, p.host, gpu);
  *total_bytes = total;
  *free_bytes = used >= total ? 0 : total - used;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  ENGRAM_EMU_READY();
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || gpu_of_ordinal(p, prop->location.id) < 0)
    return CUDA_ERROR_INVALID_DEVICE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  *granularity = p.my_host().granularity_bytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  ENGRAM_EMU_READY();
  if (handle == nullptr || prop == nullptr || flags != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  const int gpu = gpu_of_ordinal(p, prop->location.id);
  if (gpu < 0) return CUDA_ERROR_INVALID_DEVICE;
  const WorldHost& h = p.my_host();
  if (bytes == 0 || bytes % h.granularity_bytes != 0)
    return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemCreate(" + std::to_string(bytes) +
                                                  " bytes): size must be a non-zero multiple of the granularity " +
                                                  std::to_string(h.granularity_bytes));
  const unsigned types = static_cast<unsigned>(prop->requestedHandleTypes);
  if (types & CU_MEM_HANDLE_TYPE_FABRIC) {
    if (auto refused = engram::vmm_rules::fabric_refusal(fabric_host_of(p), "cuMemCreate(FABRIC)"))
      return refuse(refused->cu_error, refused->why);
  }
  if ((types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) && !h.posix)
    return refuse("CUDA_ERROR_NOT_SUPPORTED", "cuMemCreate(POSIX_FILE_DESCRIPTOR): " + p.where() +
                                                  " does not support POSIX fd handles");
  if (visit_fault(p, "create") == FaultOutcome::kFail)
    return refuse(engram::vmm_rules::injected_fault_error("create"), "cuMemCreate: injected fault (site create)");
  WorldLock lock(p);
  const uint64_t used = used_bytes(p, p.host, gpu);
  if (used + bytes > h.memory_bytes)
    return refuse("CUDA_ERROR_OUT_OF_MEMORY", "cuMemCreate(" + std::to_string(bytes) + " bytes) on GPU " +
                                                  std::to_string(gpu) + " of " + h.name + ": " +
                                                  std::to_string(used) + " of " + std::to_string(h.memory_bytes) +
                                                  " bytes already in use");
  const int fd = ::memfd_create(memfd_name(p, p.host, gpu).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return refuse("CUDA_ERROR_OUT_OF_MEMORY", std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return refuse("CUDA_ERROR_OUT_OF_MEMORY", std::string("ftruncate: ") + std::strerror(errno));
  }
  // Physical memory has a fixed size: nobody may grow or shrink it.
  ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  std::lock_guard state_lock(state().mutex);
  *handle = add_allocation(state(), Allocation{.fd = fd, .bytes = bytes, .host = p.host, .gpu = gpu, .types = types});
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  ENGRAM_EMU_READY();
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(handle);
  if (it == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.export_id != 0) unregister_fabric_export(it->second.export_id);
  ::close(it->second.fd);  // mappings keep their own descriptors: the memory lives while mapped
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void* out, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType type, unsigned long long flags) {
  ENGRAM_EMU_READY();
  if (out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (visit_fault(p, "export") == FaultOutcome::kFail)
    return refuse(engram::vmm_rules::injected_fault_error("export"),
                  "cuMemExportToShareableHandle: injected fault (site export)");
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(handle);
  if (it == s.allocations.end())
    return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemExportToShareableHandle: allocation handle " +
                                                  std::to_string(handle) + " is not live in this process");
  Allocation& a = it->second;
  if ((type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && type != CU_MEM_HANDLE_TYPE_FABRIC) ||
      (a.types & static_cast<unsigned>(type)) == 0)
    return refuse("CUDA_ERROR_INVALID_VALUE",
                  "cuMemExportToShareableHandle: the allocation was not created exportable as this handle type");
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    // A new descriptor of the memory, owned by the caller (close() it).
    const int fd = ::fcntl(a.fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) return refuse("CUDA_ERROR_OUT_OF_MEMORY", std::string("dup: ") + std::strerror(errno));
    *static_cast<int*>(out) = fd;
    return CUDA_SUCCESS;
  }
  unsigned char bytes[kFabricHandleBytes];
  std::string error;
  if (a.export_id != 0) unregister_fabric_export(a.export_id);
  if (!register_fabric_export(p, a.fd, a.gpu, a.bytes, a.export_id, bytes, error))
    return refuse("CUDA_ERROR_OUT_OF_MEMORY", error);
  std::memcpy(out, bytes, kFabricHandleBytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                                CUmemAllocationHandleType type) {
  ENGRAM_EMU_READY();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (visit_fault(p, "import") == FaultOutcome::kFail)
    return refuse(engram::vmm_rules::injected_fault_error("import"),
                  "cuMemImportFromShareableHandle: injected fault (site import)");
  Allocation a;
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    const int fd = static_cast<int>(reinterpret_cast<uintptr_t>(os_handle));
    char link[256] = {};
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = fd >= 0 ? ::readlink(path.c_str(), link, sizeof link - 1) : -1;
    if (n <= 0 || !parse_memfd_link(p, link, a.host, a.gpu))
      return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemImportFromShareableHandle(fd " + std::to_string(fd) +
                                                    "): not a descriptor of an emulated allocation of this world");
    const WorldHost& owner = p.world.hosts[static_cast<size_t>(a.host)];
    const WorldHost& mine = p.my_host();
    if (owner.name != mine.name || owner.boot_id != mine.boot_id)
      // On real hosts the descriptor never arrives (a Unix socket does not
      // cross machines: "No such file or directory", DESIGN.md section 5);
      // the emulated hosts share one kernel, so the driver refuses instead.
      return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemImportFromShareableHandle(POSIX fd): the allocation lives "
                                                "on host " + owner.name + ", this rank runs on host " + mine.name +
                                                ": a POSIX fd handle works only within one host");
    struct stat st{};
    ::fstat(fd, &st);
    a.bytes = static_cast<uint64_t>(st.st_size);
    a.fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    a.types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  } else if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
    if (os_handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    unsigned char bytes[kFabricHandleBytes];
    std::memcpy(bytes, os_handle, kFabricHandleBytes);
    // The importer's own capability first, as the emulator asks it.
    if (auto refused = engram::vmm_rules::fabric_import_capability_refusal(fabric_host_of(p),
                                                                          "cuMemImportFromShareableHandle(FABRIC)"))
      return refuse(refused->cu_error, refused->why);
    FabricImport got = import_fabric(p, bytes);
    if (got.cu_error != nullptr) return refuse(got.cu_error, got.why);
    a.fd = got.fd;
    a.host = got.host;
    a.gpu = got.gpu;
    a.bytes = got.bytes;
    a.types = CU_MEM_HANDLE_TYPE_FABRIC;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (a.fd < 0) return refuse("CUDA_ERROR_OUT_OF_MEMORY", std::string("dup: ") + std::strerror(errno));
  std::lock_guard lock(state().mutex);
  *handle = add_allocation(state(), a);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t bytes, size_t alignment, CUdeviceptr address,
                                     unsigned long long flags) {
  ENGRAM_EMU_READY();
  const uint64_t granularity = p.my_host().granularity_bytes;
  if (ptr == nullptr || flags != 0 || bytes == 0 || bytes % granularity != 0 ||
      (alignment != 0 && (alignment & (alignment - 1)) != 0))
    return CUDA_ERROR_INVALID_VALUE;
  (void)address;  // a hint; the emulation places ranges where the kernel finds room
  const uint64_t align = std::max<uint64_t>(alignment, granularity);
  void* base = ::mmap(nullptr, bytes + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(base) + align - 1) & ~(align - 1);
  // Trim the slack on both sides so the range is exactly what was asked.
  if (start > reinterpret_cast<uintptr_t>(base)) ::munmap(base, start - reinterpret_cast<uintptr_t>(base));
  const uintptr_t tail = reinterpret_cast<uintptr_t>(base) + bytes + align - (start + bytes);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(start + bytes), tail);
  std::lock_guard lock(state().mutex);
  state().reservations[start] = bytes;
  *ptr = start;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t bytes) {
  ENGRAM_EMU_READY();
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.reservations.find(ptr);
  if (it == s.reservations.end() || it->second != bytes)
    return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemAddressFree: no reservation of " + std::to_string(bytes) +
                                                  " bytes starts at this address");
  auto m = s.mappings.lower_bound(ptr);
  if (m != s.mappings.end() && m->first < ptr + bytes)
    return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemAddressFree: the range is still mapped (cuMemUnmap first)");
  ::munmap(reinterpret_cast<void*>(ptr), bytes);
  s.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
  ENGRAM_EMU_READY();
  if (visit_fault(p, "map") == FaultOutcome::kFail)
    return refuse(engram::vmm_rules::injected_fault_error("map"), "cuMemMap: injected fault (site map)");
  const uint64_t granularity = p.my_host().granularity_bytes;
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(handle);
  if (it == s.allocations.end())
    return refuse("CUDA_ERROR_INVALID_HANDLE", "cuMemMap: allocation handle " + std::to_string(handle) +
                                                   " is not live in this process");
  const Allocation& a = it->second;
  if (flags != 0 || bytes == 0 || bytes % granularity != 0 || ptr % granularity != 0 || offset % granularity != 0 ||
      offset + bytes > a.bytes)
    return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemMap: address, size and offset must be multiples of the "
                                              "granularity and lie within the allocation");
  if (!inside_reservation(s, ptr, bytes))
    return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemMap(" + std::to_string(bytes) +
                                                  " bytes): the range is not inside a reservation");
  auto next = s.mappings.lower_bound(ptr);
  const bool overlaps = (next != s.mappings.end() && next->first < ptr + bytes) ||
                        (next != s.mappings.begin() && std::prev(next)->first + std::prev(next)->second.bytes > ptr);
  if (overlaps) return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemMap: the range is already mapped");
  const int fd = ::fcntl(a.fd, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return refuse("CUDA_ERROR_OUT_OF_MEMORY", std::string("dup: ") + std::strerror(errno));
  // No access until cuMemSetAccess grants it, as on the device.
  void* at = ::mmap(reinterpret_cast<void*>(ptr), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd,
                    static_cast<off_t>(offset));
  if (at == MAP_FAILED) {
    ::close(fd);
    return refuse("CUDA_ERROR_OUT_OF_MEMORY", std::string("mmap: ") + std::strerror(errno));
  }
  s.mappings[ptr] = Mapping{.bytes = bytes, .fd = fd, .offset = offset, .meta = a};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t bytes) {
  ENGRAM_EMU_READY();
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::vector<CUdeviceptr> starts;
  if (bytes == 0 || !covered_by_mappings(s, ptr, bytes, &starts) || starts.front() != ptr) {
    return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemUnmap(" + std::to_string(bytes) +
                                                  " bytes): the range is not exactly one or more mappings");
  }
  const Mapping& last = s.mappings[starts.back()];
  if (starts.back() + last.bytes != ptr + bytes)
    return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemUnmap: the range ends inside a mapping");
  for (CUdeviceptr m : starts) {
    Mapping& mapping = s.mappings[m];
    // Back to reserved, inaccessible address space.
    ::mmap(reinterpret_cast<void*>(m), mapping.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
           -1, 0);
    ::close(mapping.fd);
    s.mappings.erase(m);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count) {
  ENGRAM_EMU_READY();
  if (desc == nullptr || count == 0 || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (visit_fault(p, "access") == FaultOutcome::kFail)
    return refuse(engram::vmm_rules::injected_fault_error("access"), "cuMemSetAccess: injected fault (site access)");
  unsigned long long flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || gpu_of_ordinal(p, desc[i].location.id) < 0)
      return CUDA_ERROR_INVALID_DEVICE;
    flags = std::max<unsigned long long>(flags, desc[i].flags);
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::vector<CUdeviceptr> starts;
  if (!covered_by_mappings(s, ptr, bytes, &starts))
    return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemSetAccess(" + std::to_string(bytes) +
                                                  " bytes): part of the range is not mapped");
  const int prot = flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                   : flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                               : PROT_NONE;
  if (::mprotect(reinterpret_cast<void*>(ptr), bytes, prot) != 0)
    return refuse("CUDA_ERROR_INVALID_VALUE", std::string("mprotect: ") + std::strerror(errno));
  for (CUdeviceptr m : starts) s.mappings[m].access = flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  ENGRAM_EMU_READY();
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE || gpu_of_ordinal(p, location->id) < 0)
    return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(state().mutex);
  if (!covered_by_mappings(state(), ptr, 1, nullptr)) return CUDA_ERROR_INVALID_VALUE;
  *flags = mapped_access(state(), ptr, 1);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* address) {
  ENGRAM_EMU_READY();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::vector<CUdeviceptr> starts;
  if (!covered_by_mappings(s, reinterpret_cast<CUdeviceptr>(address), 1, &starts)) return CUDA_ERROR_INVALID_VALUE;
  Allocation a = s.mappings[starts.front()].meta;
  a.fd = ::fcntl(s.mappings[starts.front()].fd, F_DUPFD_CLOEXEC, 3);
  a.export_id = 0;
  if (a.fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *handle = add_allocation(s, a);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  ENGRAM_EMU_READY();
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(state().mutex);
  auto it = state().allocations.find(handle);
  if (it == state().allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  std::memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = static_cast<CUmemAllocationHandleType>(it->second.types);
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  // The ordinal this process knows the owning GPU by, where it sees it.
  prop->location.id = 0;
  for (size_t o = 0; o < p.visible.size(); ++o)
    if (it->second.host == p.host && p.visible[o] == it->second.gpu) prop->location.id = static_cast<int>(o);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  ENGRAM_EMU_READY();
  if (bytes == 0) return CUDA_SUCCESS;
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lock(state().mutex);
    if (mapped_access(state(), dst, bytes) != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemcpyHtoD: the destination is not mapped with read/write access");
  }
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  ENGRAM_EMU_READY();
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lock(state().mutex);
    if (mapped_access(state(), src, bytes) == CU_MEM_ACCESS_FLAGS_PROT_NONE)
      return refuse("CUDA_ERROR_INVALID_VALUE", "cuMemcpyDtoH: the source is not mapped with access");
  }
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** function, int cuda_version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult* status) {
  (void)cuda_version;
  (void)flags;
  if (symbol == nullptr || function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // This library's own definition: the current ABI (`_v2`) where the name has one.
  Dl_info self{};
  dladdr(reinterpret_cast<void*>(&cuInit), &self);
  void* library = self.dli_fname ? dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  void* found = nullptr;
  if (library != nullptr) {
    found = dlsym(library, (std::string(symbol) + "_v2").c_str());
    if (found == nullptr) found = dlsym(library, symbol);
    dlclose(library);  // NOLOAD took a reference; the library stays loaded
  }
  *function = found;
  if (status) *status = found ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return found ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

// Not a driver call: tells backends/cuda which emulated machine this process
// is on (hostname, boot id, IMEX channel), since every emulated host of a job
// shares this one machine. The real driver has no such symbol.
int engramlabEmulatedHost(char* hostname, size_t hostname_bytes, char* boot_id, size_t boot_id_bytes,
                          int* imex_channel) {
  const Process& p = process();
  if (!p.ready || hostname == nullptr || boot_id == nullptr || imex_channel == nullptr) return 0;
  std::snprintf(hostname, hostname_bytes, "%s", p.my_host().name.c_str());
  std::snprintf(boot_id, boot_id_bytes, "%s", p.my_host().boot_id.c_str());
  *imex_channel = p.my_host().imex ? 1 : 0;
  return 1;
}

}  // extern "C"
