// What the emulated driver does not do: kernels, modules, streams, events,
// plain device allocations, graphs and the runtime's private export table
// (which cudart, and through it NCCL, asks for first). Each is refused at its
// first call with CUDA_ERROR_NOT_SUPPORTED and one line naming the call and
// the emulated driver, never a crash: a program then reports the failure it
// would report on a driver too old for it. Compiled without cuda.h: the
// arguments are never read, so one variadic signature serves every call.
#include <mutex>
#include <set>
#include <string>

#include "backends/emulated_driver/emulated_process.h"

namespace {

constexpr int kNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED

int refused(const char* call) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard lock(mutex);
  if (said.insert(call).second)
    engram::emulated::say(std::string(call) +
                          " is refused: the emulated driver runs no kernels, streams or NCCL (VMM and memory "
                          "calls only); run this part on a GPU");
  return kNotSupported;
}

}  // namespace

#define ENGRAM_REFUSED(name) \
  extern "C" int name(...) { return refused(#name); }

ENGRAM_REFUSED(cuGetExportTable)
ENGRAM_REFUSED(cuModuleLoad)
ENGRAM_REFUSED(cuModuleLoadData)
ENGRAM_REFUSED(cuModuleLoadDataEx)
ENGRAM_REFUSED(cuModuleLoadFatBinary)
ENGRAM_REFUSED(cuModuleGetFunction)
ENGRAM_REFUSED(cuLibraryLoadData)
ENGRAM_REFUSED(cuLibraryLoadFromFile)
ENGRAM_REFUSED(cuLaunchKernel)
ENGRAM_REFUSED(cuLaunchKernel_ptsz)
ENGRAM_REFUSED(cuLaunchKernelEx)
ENGRAM_REFUSED(cuLaunchCooperativeKernel)
ENGRAM_REFUSED(cuStreamCreate)
ENGRAM_REFUSED(cuStreamCreateWithPriority)
ENGRAM_REFUSED(cuStreamSynchronize)
ENGRAM_REFUSED(cuStreamDestroy_v2)
ENGRAM_REFUSED(cuEventCreate)
ENGRAM_REFUSED(cuEventRecord)
ENGRAM_REFUSED(cuEventSynchronize)
ENGRAM_REFUSED(cuMemAlloc_v2)
ENGRAM_REFUSED(cuMemAllocHost_v2)
ENGRAM_REFUSED(cuMemHostAlloc)
ENGRAM_REFUSED(cuMemHostRegister_v2)
ENGRAM_REFUSED(cuMemFree_v2)
ENGRAM_REFUSED(cuMemcpyAsync)
ENGRAM_REFUSED(cuMemcpyHtoDAsync_v2)
ENGRAM_REFUSED(cuMemcpyDtoHAsync_v2)
ENGRAM_REFUSED(cuMemsetD8_v2)
ENGRAM_REFUSED(cuCtxCreate_v4)
ENGRAM_REFUSED(cuGraphCreate)
ENGRAM_REFUSED(cuGraphLaunch)
ENGRAM_REFUSED(cuMulticastCreate)
ENGRAM_REFUSED(cuIpcGetMemHandle)
ENGRAM_REFUSED(cuIpcOpenMemHandle_v2)
ENGRAM_REFUSED(cuPointerGetAttribute)
