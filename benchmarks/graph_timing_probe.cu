// What the bench's timing method costs by itself (events, an empty graph, a
// one-empty-kernel graph), and a plain gather and gather_peer on cudaMalloc
// memory vs VMM memory (several reserve alignments, a peer shard imported
// from an fd), GPU 0 timed with GPU 1 idle: a table of median microseconds.
// `graph_timing_probe [replays]`.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "operator_checks/bench_kernels.h"
#include "benchmarks/probe_support.cuh"
#include "kernels/gather_kernels.h"

namespace engram {
namespace {

using probe::capture;
using probe::check;

void check_cu(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = "?";
    cuGetErrorName(r, &name);
    std::fprintf(stderr, "graph_timing_probe: %s: %s\n", what, name);
    std::exit(1);
  }
}

// A VMM shard on GPU `gpu` (no export: this process maps it on both GPUs),
// its address range reserved at `align` (0: the driver's choice).
uint8_t* vmm_shard(int gpu, uint64_t bytes, uint64_t align, CUmemGenericAllocationHandle* out = nullptr,
                   uint64_t* size_out = nullptr) {
  check(cudaSetDevice(gpu), "set");
  check(cudaFree(nullptr), "context");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = gpu;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  check_cu(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
  const uint64_t size = (bytes + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle h = 0;
  check_cu(cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
  CUdeviceptr va = 0;
  check_cu(cuMemAddressReserve(&va, size, align, 0, 0), "cuMemAddressReserve");
  check_cu(cuMemMap(va, size, 0, h, 0), "cuMemMap");
  CUmemAccessDesc access[2]{};
  for (int g = 0; g < 2; ++g) {
    access[g].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[g].location.id = g;
    access[g].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  check_cu(cuMemSetAccess(va, size, access, 2), "cuMemSetAccess");
  if (out != nullptr) *out = h;
  if (size_out != nullptr) *size_out = size;
  return reinterpret_cast<uint8_t*>(va);
}

// GPU `gpu`'s own mapping of an allocation exported as a POSIX fd and
// imported again: the bench's and the runtime's way to map a peer's shard.
uint8_t* import_on(int gpu, CUmemGenericAllocationHandle h, uint64_t size) {
  check(cudaSetDevice(gpu), "set");
  int fd = -1;
  check_cu(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "export");
  CUmemGenericAllocationHandle imported = 0;
  check_cu(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), "import");
  CUdeviceptr va = 0;
  check_cu(cuMemAddressReserve(&va, size, 0, 0, 0), "cuMemAddressReserve");
  check_cu(cuMemMap(va, size, 0, imported, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = gpu;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check_cu(cuMemSetAccess(va, size, &access, 1), "cuMemSetAccess");
  return reinterpret_cast<uint8_t*>(va);
}

__global__ void empty_body() {}

struct Timing {
  std::string name;
  double p50_us;
};

// Median us of `replays` replays of launch(g) on GPU g's stream, for every
// stream given (GPU 0's first and timed).
double p50(const std::vector<cudaStream_t>& streams, int replays, const std::function<void(int)>& launch) {
  std::vector<int> devices(streams.size());
  std::iota(devices.begin(), devices.end(), 0);
  return probe::median(
      probe::time_replays(devices, streams, replays, [&](size_t g) { launch(static_cast<int>(g)); }));
}

}  // namespace
}  // namespace engram

using namespace engram;

int main(int argc, char** argv) {
  probe::probe_name() = "graph_timing_probe";
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("graph_timing_probe: no GPU; nothing measured\n");
    return 0;
  }
  const int replays = probe::replays_from_args(argc, argv, 200);
  const int gpus = std::min(count, 2);
  std::vector<cudaStream_t> streams(gpus);
  for (int g = 0; g < gpus; ++g) {
    check(cudaSetDevice(g), "set");
    check(cudaStreamCreateWithFlags(&streams[g], cudaStreamNonBlocking), "stream");
  }
  std::vector<cudaStream_t> only0{streams[0]};
  std::vector<Timing> rows;

  rows.push_back({"two events, nothing between", p50(only0, replays, [](int) {})});
  rows.push_back({"empty kernel, stream launch", p50(only0, replays, [&](int) {
                    empty_body<<<1, 32, 0, streams[0]>>>();
                  })});
  std::vector<cudaGraphExec_t> empty(gpus), one(gpus), inner(gpus);
  for (int g = 0; g < gpus; ++g) {
    check(cudaSetDevice(g), "set");
    empty[g] = capture(streams[g], [](cudaStream_t) {});
    one[g] = capture(streams[g], [](cudaStream_t s) { empty_body<<<1, 32, 0, s>>>(); });
  }
  rows.push_back({"empty graph", p50(only0, replays, [&](int g) {
                    check(cudaGraphLaunch(empty[g], streams[g]), "graph launch");
                  })});
  rows.push_back({"one-empty-kernel graph, GPU 0 only", p50(only0, replays, [&](int g) {
                    check(cudaGraphLaunch(one[g], streams[g]), "graph launch");
                  })});
  if (gpus > 1) {
    rows.push_back({"one-empty-kernel graph, both GPUs", p50(streams, replays, [&](int g) {
                      check(cudaGraphLaunch(one[g], streams[g]), "graph launch");
                    })});
  }
  // Events inside the graph, around its kernel: the kernel node alone.
  {
    check(cudaSetDevice(0), "set");
    std::vector<double> us;
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "event");
    check(cudaEventCreate(&b), "event");
    cudaGraphExec_t e = capture(streams[0], [&](cudaStream_t s) {
      check(cudaEventRecordWithFlags(a, s, cudaEventRecordExternal), "record ext");
      empty_body<<<1, 32, 0, s>>>();
      check(cudaEventRecordWithFlags(b, s, cudaEventRecordExternal), "record ext");
    });
    for (int i = 0; i < replays; ++i) {
      check(cudaGraphLaunch(e, streams[0]), "graph launch");
      check(cudaStreamSynchronize(streams[0]), "sync");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, a, b), "elapsed");
      if (i >= 20) us.push_back(ms * 1000.0);
    }
    std::sort(us.begin(), us.end());
    rows.push_back({"events inside the graph around one empty kernel", probe::median(us)});
    cudaGraphExecDestroy(e);
  }

  // Memory kinds x kernels: the plain kernel and gather_peer, on cudaMalloc +
  // peer access and on VMM memory reserved at several alignments, 8 GiB per
  // GPU, every shard filled with the bench's random rows.
  if (gpus > 1) {
    for (int g = 0; g < 2; ++g) {
      check(cudaSetDevice(g), "set");
      cudaError_t p = cudaDeviceEnablePeerAccess(1 - g, 0);
      if (p != cudaSuccess && p != cudaErrorPeerAccessAlreadyEnabled) check(p, "peer access");
    }
    const uint64_t shard_bytes = 8ull << 30;
    uint8_t* fd_kind_peer = nullptr;
    const int64_t rows_per = (int64_t)(shard_bytes / 264);
    struct Memory {
      std::string name;
      uint8_t* shard[2];
    };
    std::vector<Memory> kinds;
    {
      Memory m{"cudaMalloc", {nullptr, nullptr}};
      for (int g = 0; g < 2; ++g) {
        check(cudaSetDevice(g), "set");
        check(cudaMalloc(&m.shard[g], shard_bytes), "malloc shard");
      }
      kinds.push_back(m);
    }
    for (uint64_t align : {0ull, 1ull << 30, 8ull << 30}) {
      Memory m{"VMM, reserve aligned " + (align == 0 ? std::string("by default") : std::to_string(align >> 20) + " MiB"),
               {nullptr, nullptr}};
      for (int g = 0; g < 2; ++g) m.shard[g] = vmm_shard(g, shard_bytes, align);
      kinds.push_back(m);
    }
    {
      Memory m{"VMM, peer shard imported from an fd", {nullptr, nullptr}};
      CUmemGenericAllocationHandle h = 0;
      uint64_t size = 0;
      m.shard[0] = vmm_shard(0, shard_bytes, 0);
      uint8_t* own1 = vmm_shard(1, shard_bytes, 0, &h, &size);
      m.shard[1] = own1;  // filled through GPU 1's own mapping below, then swapped
      kinds.push_back(m);
      kinds.back().shard[1] = own1;
      fd_kind_peer = import_on(0, h, size);
    }
    for (Memory& m : kinds) {
      for (int g = 0; g < 2; ++g) {
        check(cudaSetDevice(g), "set");
        engram::operator_checks::ShardFillArgs fill;
        fill.shard = m.shard[g];
        fill.first_row = g * rows_per;
        fill.rows = rows_per;
        fill.row_bytes = 264;
        fill.dim = 256;
        fill.seed = 7;
        check(engram::operator_checks::fill_shard(fill, nullptr), "fill");
        check(cudaDeviceSynchronize(), "fill sync");
      }
    }
    kinds.back().shard[1] = fd_kind_peer;
    check(cudaSetDevice(0), "set");
    const int64_t starts_host[3] = {0, rows_per, 2 * rows_per};
    int64_t* d_starts = nullptr;
    void** d_bases = nullptr;
    check(cudaMalloc(&d_starts, sizeof(starts_host)), "malloc starts");
    check(cudaMemcpy(d_starts, starts_host, sizeof(starts_host), cudaMemcpyHostToDevice), "starts");
    check(cudaMalloc(&d_bases, 2 * sizeof(void*)), "malloc bases");
    for (int64_t tokens : {1, 16, 64, 256, 1024, 8192}) {
      const int64_t slots = tokens * 24;
      std::vector<int64_t> ids(slots);
      uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)tokens;
      for (auto& id : ids) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        id = (int64_t)(x % (uint64_t)(2 * rows_per));
      }
      int64_t* d_ids = nullptr;
      uint4* d_out = nullptr;
      check(cudaMalloc(&d_ids, slots * 8), "malloc ids");
      check(cudaMalloc(&d_out, slots * 512), "malloc out");
      check(cudaMemcpy(d_ids, ids.data(), slots * 8, cudaMemcpyHostToDevice), "ids");
      for (Memory& m : kinds) {
        check(cudaMemcpy(d_bases, m.shard, 2 * sizeof(void*), cudaMemcpyHostToDevice), "bases");
        // The bench's plain reference kernel (no dequantisation).
        engram::operator_checks::PlainGatherArgs plain_args;
        plain_args.ids = d_ids;
        plain_args.slots = slots;
        plain_args.shard_count = 2;
        plain_args.starts[1] = rows_per;
        plain_args.starts[2] = 2 * rows_per;
        plain_args.bases[0] = m.shard[0];
        plain_args.bases[1] = m.shard[1];
        plain_args.row_bytes = 264;
        plain_args.out = d_out;
        cudaGraphExec_t plain = capture(streams[0], [&](cudaStream_t s) {
          check(engram::operator_checks::plain_gather(plain_args, s), "plain_gather");
        });
        engram::kernels::GatherPeerArgs args;
        args.ids = d_ids;
        args.tokens = tokens;
        args.heads = 24;
        args.shard_starts = d_starts;
        args.shard_bases = d_bases;
        args.shard_count = 2;
        args.layout.format = engram::RowFormat::kFp8E4M3Ue8m0;
        args.layout.dim = 256;
        args.layout.row_bytes = 264;
        args.out = reinterpret_cast<uint16_t*>(d_out);
        cudaGraphExec_t ours = capture(streams[0], [&](cudaStream_t s) {
          check(engram::kernels::gather_peer(args, s), "gather_peer");
        });
        const std::string at = ", " + m.name + ", " + std::to_string(tokens) + " tokens";
        rows.push_back({"plain gather" + at, p50(only0, replays, [&](int) {
                          check(cudaGraphLaunch(plain, streams[0]), "graph launch");
                        })});
        rows.push_back({"gather_peer" + at, p50(only0, replays, [&](int) {
                          check(cudaGraphLaunch(ours, streams[0]), "graph launch");
                        })});
        cudaGraphExecDestroy(plain);
        cudaGraphExecDestroy(ours);
      }
      cudaFree(d_ids);
      cudaFree(d_out);
    }
  }

  std::printf("| what (GPU 0, host queued ahead behind a spin, %d replays) | p50 us |\n| --- | ---: |\n", replays);
  for (const Timing& t : rows) std::printf("| %s | %.2f |\n", t.name.c_str(), t.p50_us);
  return 0;
}
