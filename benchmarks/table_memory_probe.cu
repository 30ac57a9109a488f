// Does the table's memory change a small lookup's time? gather_peer over one
// table of the one-layer V4.1 size (or `gib` GiB), held in each kind of
// device memory in turn (cudaMalloc, as the bench's one-process reference
// holds it; VMM exportable as a POSIX fd with the address range reserved as
// the runtime reserves it, and at a wide alignment; VMM with no handle
// type), the kinds cycled twice so an order effect shows as a difference
// between the cycles. Each kind is timed over two sets of ids: drawn
// uniformly over the table (the reference's) and laid out as the runtime's
// test ids (each head in its own region, DEAD, out-of-table and negative ids
// in every 97th slot). One kind at a time: two tables of this size do not
// fit one H200. Same timing method as the bench; prints median and mean us
// (the mean shows a shift smaller than the event timer's step).
// `table_memory_probe [replays] [gib]`.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmarks/probe_support.cuh"
#include "core/base/splitmix64.h"
#include "core/model/table_spec.h"
#include "kernels/gather_kernels.h"
#include "operator_checks/bench_kernels.h"

namespace engram {
namespace {

using probe::check;

constexpr int kHeads = 24;
constexpr uint64_t kRowBytes = 264;
constexpr int64_t kLayerRows = 384'006'168;  // models/deepseek-v4.1-flash-layer1.yaml

void check_cu(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = "?";
    cuGetErrorName(r, &name);
    std::fprintf(stderr, "table_memory_probe: %s: %s\n", what, name);
    std::exit(1);
  }
}

enum class Kind { kCudaMalloc, kVmmFdRuntime, kVmmFdWide, kVmmPlain };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kCudaMalloc: return "cudaMalloc (the reference's)";
    case Kind::kVmmFdRuntime: return "VMM, fd-exportable, reserved as the runtime does";
    case Kind::kVmmFdWide: return "VMM, fd-exportable, reserve aligned 2 GiB";
    case Kind::kVmmPlain: return "VMM, no handle type";
  }
  return "?";
}

// One table of `bytes` in memory of kind `k`, freed by release().
struct Table {
  Kind kind;
  uint64_t bytes = 0;
  uint8_t* base = nullptr;
  CUmemGenericAllocationHandle handle = 0;
  uint64_t mapped = 0;

  static Table make(Kind k, uint64_t bytes) {
    Table t{k, bytes};
    if (k == Kind::kCudaMalloc) {
      check(cudaMalloc(&t.base, bytes), "cudaMalloc table");
      return t;
    }
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = k == Kind::kVmmPlain ? CU_MEM_HANDLE_TYPE_NONE : CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    // The runtime rounds to the minimum granularity (backends/cuda/cuda_device_memory.cc).
    check_cu(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
    t.mapped = (bytes + gran - 1) / gran * gran;
    check_cu(cuMemCreate(&t.handle, t.mapped, &prop, 0), "cuMemCreate");
    CUdeviceptr va = 0;
    const uint64_t align = k == Kind::kVmmFdWide ? (2ull << 30) : 0;
    check_cu(cuMemAddressReserve(&va, t.mapped, align, 0, 0), "cuMemAddressReserve");
    check_cu(cuMemMap(va, t.mapped, 0, t.handle, 0), "cuMemMap");
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check_cu(cuMemSetAccess(va, t.mapped, &access, 1), "cuMemSetAccess");
    t.base = reinterpret_cast<uint8_t*>(va);
    return t;
  }

  void release() {
    if (kind == Kind::kCudaMalloc) {
      check(cudaFree(base), "cudaFree table");
    } else {
      const auto va = reinterpret_cast<CUdeviceptr>(base);
      check_cu(cuMemUnmap(va, mapped), "cuMemUnmap");
      check_cu(cuMemAddressFree(va, mapped), "cuMemAddressFree");
      check_cu(cuMemRelease(handle), "cuMemRelease");
    }
    base = nullptr;
  }
};

// The reference's ids: uniform over the table, none DEAD.
std::vector<int64_t> uniform_ids(int64_t slots, int64_t rows, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(slots));
  uint64_t rng = seed;
  for (auto& id : ids) id = static_cast<int64_t>(splitmix64_next(rng) % static_cast<uint64_t>(rows));
  return ids;
}

// The runtime test ids' shape (operator_checks/lookup_checks.cc): head h in
// its own region of rows / heads rows, every 97th slot DEAD, the next out of
// the table, the next negative.
std::vector<int64_t> runtime_shaped_ids(int64_t slots, int64_t rows, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(slots));
  const int64_t region = rows / kHeads;
  for (int64_t s = 0; s < slots; ++s) {
    const uint64_t draw = splitmix64_at(seed, static_cast<uint64_t>(s));
    int64_t id = (s % kHeads) * region + static_cast<int64_t>(draw % static_cast<uint64_t>(region));
    if (s % 97 == 0) id = kDeadId;
    if (s % 97 == 1) id = rows + static_cast<int64_t>(draw % 1000);
    if (s % 97 == 2) id = -2 - static_cast<int64_t>(draw % 1000);
    ids[static_cast<size_t>(s)] = id;
  }
  return ids;
}

}  // namespace
}  // namespace engram

using namespace engram;

int main(int argc, char** argv) {
  probe::probe_name() = "table_memory_probe";
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("table_memory_probe: no GPU; nothing measured\n");
    return 0;
  }
  const int replays = probe::replays_from_args(argc, argv, 1000);
  int64_t rows = kLayerRows;
  if (argc > 2) {
    const double gib = std::strtod(argv[2], nullptr);
    if (!(gib > 0 && gib < 1024)) {
      std::fprintf(stderr, "table_memory_probe: gib '%s' must be a number of GiB in (0, 1024), e.g. 8\n", argv[2]);
      return 2;
    }
    rows = static_cast<int64_t>(gib * double(1ull << 30) / kRowBytes);
  }
  const uint64_t bytes = (static_cast<uint64_t>(rows) * kRowBytes + 15) / 16 * 16 + 16;  // the fast path's slack
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "context");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const std::vector<int64_t> token_counts = {1, 16, 64, 256, 1024};
  const int64_t slots_max = token_counts.back() * kHeads;
  int64_t *d_ids = nullptr, *d_starts = nullptr;
  void** d_bases = nullptr;
  uint16_t* d_out = nullptr;
  check(cudaMalloc(&d_ids, static_cast<size_t>(slots_max) * 8), "malloc ids");
  check(cudaMalloc(&d_out, static_cast<size_t>(slots_max) * 512), "malloc out");
  check(cudaMalloc(&d_starts, 2 * sizeof(int64_t)), "malloc starts");
  check(cudaMalloc(&d_bases, sizeof(void*)), "malloc bases");
  const int64_t starts_host[2] = {0, rows};
  check(cudaMemcpy(d_starts, starts_host, sizeof(starts_host), cudaMemcpyHostToDevice), "starts");

  std::printf("table_memory_probe: %lld rows x %llu B (%.1f GiB), gather_peer, %d replays, median / mean us\n",
              static_cast<long long>(rows), static_cast<unsigned long long>(kRowBytes), double(bytes) / (1ull << 30),
              replays);
  std::printf("| cycle | memory | ids |");
  for (int64_t t : token_counts) std::printf(" %lld |", static_cast<long long>(t));
  std::printf("\n| --- | --- | --- |");
  for (size_t i = 0; i < token_counts.size(); ++i) std::printf(" ---: |");
  std::printf("\n");
  const Kind kinds[] = {Kind::kCudaMalloc, Kind::kVmmFdRuntime, Kind::kVmmFdWide, Kind::kVmmPlain};
  for (int cycle = 1; cycle <= 2; ++cycle) {
    for (Kind kind : kinds) {
      Table table = Table::make(kind, bytes);
      operator_checks::ShardFillArgs fill;
      fill.shard = table.base;
      fill.rows = rows;
      fill.row_bytes = kRowBytes;
      fill.dim = 256;
      fill.seed = 7;
      check(operator_checks::fill_shard(fill, nullptr), "fill");
      check(cudaDeviceSynchronize(), "fill sync");
      const void* base = table.base;
      check(cudaMemcpy(d_bases, &base, sizeof(void*), cudaMemcpyHostToDevice), "bases");
      for (int shape = 0; shape < 2; ++shape) {
        std::printf("| %d | %s | %s |", cycle, kind_name(kind), shape == 0 ? "uniform" : "runtime's shape");
        for (int64_t tokens : token_counts) {
          const int64_t slots = tokens * kHeads;
          const uint64_t seed = 0x5eedull * static_cast<uint64_t>(tokens) + static_cast<uint64_t>(cycle);
          const std::vector<int64_t> ids = shape == 0 ? uniform_ids(slots, rows, seed) : runtime_shaped_ids(slots, rows, seed);
          check(cudaMemcpy(d_ids, ids.data(), ids.size() * 8, cudaMemcpyHostToDevice), "ids");
          kernels::GatherPeerArgs g;
          g.ids = d_ids;
          g.tokens = tokens;
          g.heads = kHeads;
          g.shard_starts = d_starts;
          g.shard_bases = d_bases;
          g.shard_count = 1;
          g.layout.format = RowFormat::kFp8E4M3Ue8m0;
          g.layout.dim = 256;
          g.layout.row_bytes = kRowBytes;
          g.out = d_out;
          cudaGraphExec_t exec = probe::capture(stream, [&](cudaStream_t s) {
            probe::check(kernels::gather_peer(g, s), "gather_peer");
          });
          const std::vector<double> us = probe::time_replays({0}, {stream}, replays, [&](size_t) {
            check(cudaGraphLaunch(exec, stream), "graph launch");
          });
          check(cudaGraphExecDestroy(exec), "graph destroy");
          double sum = 0;
          for (double u : us) sum += u;
          std::printf(" %.2f / %.2f |", probe::median(us), sum / static_cast<double>(us.size()));
        }
        std::printf("\n");
        std::fflush(stdout);
      }
      table.release();
    }
  }
  return 0;
}
