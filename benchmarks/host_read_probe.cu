// Why a GPU reading a host table collapses at large token counts, and what
// avoids it. For each way of giving the GPU a host table (a /dev/shm file
// registered with cudaHostRegister, the same on a huge-page tmpfs,
// cudaMallocHost, a VMM allocation on a host NUMA node), each table size and
// each kernel, it times one lookup's row reads (24 random rows of 264 B per
// token) with the ids fresh each replay (as decode steps are) or the same
// every replay (as a bench that reuses its ids), beside the same run's
// ceilings: a pinned host-to-device copy of the same bytes and a sequential
// read of the mapped table by a kernel. Kernels: "plain" (a warp per row, raw
// bytes), "runtime" (kernels::gather_range, what the runtime's host lookup
// runs below its staging size, dequantising), and two grid shapes.
//
//   host_read_probe --gib 2,64 --kinds shm,pinned,vmm [--shm-dir /dev/shm] [--thp-dir DIR]
//                   [--tokens 1,64,8192] [--stager 16:0,24:0.3 (CPU threads:direct share)]
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backends/cuda/host_row_stager.h"
#include "benchmarks/probe_support.cuh"
#include "kernels/gather_kernels.h"

namespace {

using engram::probe::check;

constexpr uint64_t kRowBytes = 264;
constexpr int kHeads = 24;

void check_cu(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    std::fprintf(stderr, "host_read_probe: %s: %s\n", what, name ? name : "?");
    std::exit(1);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Writes every page from 16 threads (tmpfs allocates on first touch).
void fill_host(uint8_t* p, uint64_t bytes) {
  const int threads = 16;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([=] {
      const uint64_t begin = bytes / threads * t, end = t == threads - 1 ? bytes : bytes / threads * (t + 1);
      for (uint64_t i = begin; i < end; i += 8) {
        uint64_t v = (i * 0x9E3779B97F4A7C15ull) ^ 0x3c3c3c3c3c3c3c3cull;
        std::memcpy(p + i, &v, std::min<uint64_t>(8, end - i));
      }
    });
  }
  for (auto& th : pool) th.join();
}

// Warp per row: 32 lanes x 8 B of data, lane 0 also the 8 scale bytes.
__global__ void plain_rows(const int64_t* ids, int64_t slots, const uint8_t* table, uint2* out) {
  const int64_t slot = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (slot >= slots) return;
  const uint8_t* row = table + static_cast<uint64_t>(ids[slot]) * kRowBytes;
  uint2 v = reinterpret_cast<const uint2*>(row)[lane];
  if (lane == 0) {
    const uint2 s = *reinterpret_cast<const uint2*>(row + 256);
    v.x ^= s.x;
    v.y ^= s.y;
  }
  out[slot * 32 + lane] = v;
}

// The same reads from a bounded grid (grid-stride over slots).
__global__ void bounded_rows(const int64_t* ids, int64_t slots, const uint8_t* table, uint2* out) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t slot = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; slot < slots;
       slot += warps) {
    const uint8_t* row = table + static_cast<uint64_t>(ids[slot]) * kRowBytes;
    uint2 v = reinterpret_cast<const uint2*>(row)[lane];
    if (lane == 0) {
      const uint2 s = *reinterpret_cast<const uint2*>(row + 256);
      v.x ^= s.x;
      v.y ^= s.y;
    }
    out[slot * 32 + lane] = v;
  }
}

// Four rows per warp, every load issued before any is used.
__global__ void four_rows(const int64_t* ids, int64_t slots, const uint8_t* table, uint2* out) {
  const int64_t first = ((static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5) * 4;
  const int lane = threadIdx.x & 31;
  uint2 v[4], s[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (first + k < slots) {
      const uint8_t* row = table + static_cast<uint64_t>(ids[first + k]) * kRowBytes;
      v[k] = reinterpret_cast<const uint2*>(row)[lane];
      s[k] = lane == 0 ? *reinterpret_cast<const uint2*>(row + 256) : make_uint2(0, 0);
    }
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (first + k < slots) out[(first + k) * 32 + lane] = make_uint2(v[k].x ^ s[k].x, v[k].y ^ s[k].y);
  }
}

// Sequential read of `bytes` from the mapped table (the zero-copy ceiling).
__global__ void sequential_read(const uint4* p, uint64_t count, uint4* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
  }
  if (acc.x == 0x12345678u) sink[0] = acc;
}

struct Table {
  std::string kind;
  uint64_t bytes = 0;
  uint8_t* host = nullptr;    // CPU address
  const uint8_t* device = nullptr;  // what the kernel reads
  double prepare_s = 0;       // create + fill
  double register_s = 0;
  // clean-up
  int fd = -1;
  std::string path;
  CUmemGenericAllocationHandle vmm = 0;
  CUdeviceptr vmm_address = 0;
};

Table make_file_table(const std::string& kind, const std::string& dir, uint64_t bytes) {
  Table t;
  t.kind = kind;
  t.bytes = bytes;
  t.path = dir + "/engramlab-probe-" + std::to_string(getpid());
  auto t0 = std::chrono::steady_clock::now();
  t.fd = open(t.path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (t.fd < 0 || ftruncate(t.fd, static_cast<off_t>(bytes)) != 0) {
    std::perror(t.path.c_str());
    std::exit(1);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, t.fd, 0);
  if (p == MAP_FAILED) { std::perror("mmap"); std::exit(1); }
  t.host = static_cast<uint8_t*>(p);
  fill_host(t.host, bytes);
  t.prepare_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  check(cudaHostRegister(t.host, bytes, cudaHostRegisterMapped | cudaHostRegisterReadOnly), "cudaHostRegister");
  void* d = nullptr;
  check(cudaHostGetDevicePointer(&d, t.host, 0), "cudaHostGetDevicePointer");
  t.device = static_cast<const uint8_t*>(d);
  t.register_s = seconds_since(t0);
  return t;
}

Table make_pinned_table(uint64_t bytes) {
  Table t;
  t.kind = "pinned";
  t.bytes = bytes;
  auto t0 = std::chrono::steady_clock::now();
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocMapped), "cudaHostAlloc");
  t.register_s = seconds_since(t0);
  t.host = static_cast<uint8_t*>(p);
  t0 = std::chrono::steady_clock::now();
  fill_host(t.host, bytes);
  t.prepare_s = seconds_since(t0);
  void* d = nullptr;
  check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer");
  t.device = static_cast<const uint8_t*>(d);
  return t;
}

Table make_vmm_table(uint64_t bytes) {
  Table t;
  t.kind = "vmm_host";
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  check_cu(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
  t.bytes = (bytes + granularity - 1) / granularity * granularity;
  auto t0 = std::chrono::steady_clock::now();
  check_cu(cuMemCreate(&t.vmm, t.bytes, &prop, 0), "cuMemCreate(HOST_NUMA)");
  check_cu(cuMemAddressReserve(&t.vmm_address, t.bytes, granularity, 0, 0), "cuMemAddressReserve");
  check_cu(cuMemMap(t.vmm_address, t.bytes, 0, t.vmm, 0), "cuMemMap");
  CUmemAccessDesc access[2]{};
  access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access[0].location.id = 0;
  access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  access[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  access[1].location.id = 0;
  access[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check_cu(cuMemSetAccess(t.vmm_address, t.bytes, access, 2), "cuMemSetAccess");
  t.register_s = seconds_since(t0);
  t.host = reinterpret_cast<uint8_t*>(t.vmm_address);
  t.device = t.host;
  t0 = std::chrono::steady_clock::now();
  fill_host(t.host, t.bytes);
  t.prepare_s = seconds_since(t0);
  std::printf("  vmm_host granularity %zu B\n", granularity);
  return t;
}

void destroy(Table& t) {
  if (t.kind == "pinned") {
    check(cudaFreeHost(t.host), "cudaFreeHost");
  } else if (t.kind == "vmm_host") {
    check_cu(cuMemUnmap(t.vmm_address, t.bytes), "cuMemUnmap");
    check_cu(cuMemAddressFree(t.vmm_address, t.bytes), "cuMemAddressFree");
    check_cu(cuMemRelease(t.vmm), "cuMemRelease");
  } else {
    check(cudaHostUnregister(t.host), "cudaHostUnregister");
    munmap(t.host, t.bytes);
    close(t.fd);
    unlink(t.path.c_str());
  }
}

std::vector<uint64_t> parse_list(const char* s) {
  std::vector<uint64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoull(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  engram::probe::probe_name() = "host_read_probe";
  std::vector<uint64_t> gibs = {2, 64};
  std::string kinds = "shm,pinned,vmm";
  std::string shm_dir = "/dev/shm", thp_dir;
  int replays = 30;
  bool only_plain = false;  // --plain-only 1: the stager variants, the plain and the runtime's kernel, fresh ids
  // --stager T:D,T:D,...: the stager variants timed (T CPU threads, D the
  // share of tokens the kernel reads directly); --tokens N,N,...: the sizes.
  struct StagerVariant {
    int threads;
    double direct;
    bool graph;
  };
  std::vector<StagerVariant> stager_variants = {{16, 0.0, false}, {16, 0.0, true},  {24, 0.0, false},
                                                {24, 0.2, false}, {24, 0.3, false}, {32, 0.25, false}};
  std::vector<int64_t> token_counts = {1, 64, 256, 1024, 8192};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--gib") gibs = parse_list(argv[i + 1]);
    else if (a == "--kinds") kinds = argv[i + 1];
    else if (a == "--shm-dir") shm_dir = argv[i + 1];
    else if (a == "--thp-dir") thp_dir = argv[i + 1];
    else if (a == "--replays") replays = std::atoi(argv[i + 1]);
    else if (a == "--plain-only") only_plain = std::atoi(argv[i + 1]) != 0;
    else if (a == "--tokens") {
      token_counts.clear();
      for (uint64_t n : parse_list(argv[i + 1])) token_counts.push_back(static_cast<int64_t>(n));
    } else if (a == "--stager") {
      stager_variants.clear();
      const std::string list = argv[i + 1];
      for (size_t at = 0; at < list.size();) {
        size_t end = list.find(',', at);
        if (end == std::string::npos) end = list.size();
        const std::string item = list.substr(at, end - at);
        const size_t colon = item.find(':');
        stager_variants.push_back({std::atoi(item.substr(0, colon).c_str()),
                                   colon == std::string::npos ? 0.0 : std::atof(item.substr(colon + 1).c_str()), false});
        at = end + 1;
      }
    }
  }
  for (int64_t tokens : token_counts) {
    if (tokens < 1 || tokens > 8192) {
      std::fprintf(stderr, "host_read_probe: --tokens %ld must be within 1..8192\n", static_cast<long>(tokens));
      return 2;
    }
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "context");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SMs");

  const int64_t max_slots = 8192 * kHeads;
  constexpr int kIdSets = 8;  // fresh ids: rotate over sets bigger than any translation cache
  int64_t* ids = nullptr;
  uint2* out = nullptr;
  uint4* sink = nullptr;
  check(cudaMalloc(&ids, sizeof(int64_t) * max_slots * kIdSets), "ids");
  check(cudaMalloc(&out, 512 * max_slots), "out");  // 256 bf16 per slot (the stager dequantises)
  check(cudaMalloc(&sink, 64), "sink");
  void* pinned_src = nullptr;
  void* device_dst = nullptr;
  const uint64_t copy_bytes = static_cast<uint64_t>(max_slots) * kRowBytes;
  check(cudaHostAlloc(&pinned_src, copy_bytes, 0), "pinned src");
  std::memset(pinned_src, 1, copy_bytes);
  check(cudaMalloc(&device_dst, copy_bytes), "copy dst");

  std::printf("%-9s %5s %-8s %-6s %8s %10s %10s %10s %10s %10s\n", "kind", "GiB", "kernel", "ids", "tokens", "p50_us",
              "rows_GBps", "h2d_us", "h2d_GBps", "ratio");
  for (uint64_t gib : gibs) {
    const uint64_t bytes = gib << 30;
    for (size_t k0 = 0; k0 < kinds.size();) {
      size_t k1 = kinds.find(',', k0);
      if (k1 == std::string::npos) k1 = kinds.size();
      const std::string kind = kinds.substr(k0, k1 - k0);
      k0 = k1 + 1;
      Table t;
      if (kind == "shm") t = make_file_table("shm", shm_dir, bytes);
      else if (kind == "thp") {
        if (thp_dir.empty()) continue;
        t = make_file_table("thp", thp_dir, bytes);
      } else if (kind == "pinned") t = make_pinned_table(bytes);
      else if (kind == "vmm") t = make_vmm_table(bytes);
      else continue;
      const int64_t rows = static_cast<int64_t>(t.bytes / kRowBytes);
      std::printf("# %s %lu GiB: create+fill %.2f s, register %.2f s, rows %ld\n", kind.c_str(),
                  static_cast<unsigned long>(gib), t.prepare_s, t.register_s, static_cast<long>(rows));
      {
        std::mt19937_64 rng(gib * 7 + kind.size());
        std::vector<int64_t> host_ids(static_cast<size_t>(max_slots) * kIdSets);
        for (auto& id : host_ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        check(cudaMemcpy(ids, host_ids.data(), host_ids.size() * sizeof(int64_t), cudaMemcpyHostToDevice), "ids");
      }
      // How many of the table's pages the kernel maps as 2 MiB pages.
      if (kind == "shm" || kind == "thp") {
        FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
        char line[256];
        while (f && std::fgets(line, sizeof line, f))
          if (std::strstr(line, "ShmemPmdMapped") || std::strstr(line, "Shared_Hugetlb")) std::printf("# %s", line);
        if (f) std::fclose(f);
      }
      // The CPU alone gathering random rows (no GPU): 196,608 rows.
      {
        std::mt19937_64 rng(99);
        std::vector<int64_t> cpu_ids(static_cast<size_t>(max_slots));
        for (auto& id : cpu_ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        std::vector<uint8_t> dst(static_cast<size_t>(max_slots) * kRowBytes);
        for (int threads : {1, 8, 16, 24, 32}) {
          double best = 1e30;
          for (int rep = 0; rep < 3; ++rep) {
            auto t0 = std::chrono::steady_clock::now();
            std::vector<std::thread> pool;
            for (int th = 0; th < threads; ++th) {
              pool.emplace_back([&, th] {
                const int64_t b = max_slots * th / threads, e = max_slots * (th + 1) / threads;
                for (int64_t i = b; i < e; ++i) {
                  if (i + 8 < e) {
                    const uint8_t* p = t.host + static_cast<uint64_t>(cpu_ids[static_cast<size_t>(i + 8)]) * kRowBytes;
                    for (int l = 0; l < 320; l += 64) __builtin_prefetch(p + l, 0, 0);
                  }
                  std::memcpy(dst.data() + i * kRowBytes, t.host + static_cast<uint64_t>(cpu_ids[static_cast<size_t>(i)]) * kRowBytes, kRowBytes);
                }
              });
            }
            for (auto& th : pool) th.join();
            best = std::min(best, seconds_since(t0));
          }
          std::printf("# %s cpu gather, %d threads: %.1f us, %.2f GB/s of rows\n", kind.c_str(), threads, best * 1e6,
                      max_slots * kRowBytes / best / 1e9);
        }
      }
      // Sequential ceiling over the first 1 GiB.
      {
        const uint64_t n = std::min<uint64_t>(t.bytes, 1ull << 30) / 16;
        auto us = engram::probe::time_replays({0}, {stream}, 5, [&](size_t) {
          sequential_read<<<sms * 4, 256, 0, stream>>>(reinterpret_cast<const uint4*>(t.device), n, sink);
        });
        std::printf("# %s sequential read of 1 GiB: %.1f GB/s\n", kind.c_str(), (n * 16) / (engram::probe::median(us) * 1e3));
      }
      for (int64_t tokens : token_counts) {
        const int64_t slots = tokens * kHeads;
        const uint64_t row_bytes_total = static_cast<uint64_t>(slots) * kRowBytes;
        auto h2d = engram::probe::time_replays({0}, {stream}, replays, [&](size_t) {
          check(cudaMemcpyAsync(device_dst, pinned_src, row_bytes_total, cudaMemcpyHostToDevice, stream), "h2d");
        });
        const double h2d_us = engram::probe::median(h2d);
        for (const StagerVariant& variant : stager_variants) {
          const int threads = variant.threads;
          const int graph = variant.graph ? 1 : 0;
          const double direct = variant.direct;
          {
            engram::cuda::HostRowStager::Options so;
            so.slots_max = max_slots;
            so.ids_max = max_slots;
            so.row_bytes = kRowBytes;
            so.threads = threads;
            so.direct_fraction = direct;
            auto stager = engram::cuda::HostRowStager::create(0, so);
            check(stager.status(), "HostRowStager::create");
            engram::cuda::HostGatherArgs a;
            a.tokens = tokens;
            a.ids_per_token = kHeads;
            a.head_begin = 0;
            a.head_count = kHeads;
            a.table = reinterpret_cast<const std::byte*>(t.host);
            a.table_device = t.device;
            a.first_row = 0;
            a.row_count = rows;
            a.layout = engram::kernels::RowLayout{engram::RowFormat::kFp8E4M3Ue8m0, 256, kRowBytes, engram::ScaleByteRule::kVllm};
            a.out = reinterpret_cast<uint16_t*>(out);
            std::vector<cudaGraphExec_t> graphs;
            if (graph) {
              for (int set = 0; set < kIdSets; ++set) {
                a.ids = ids + set * max_slots;
                graphs.push_back(engram::probe::capture(stream, [&](cudaStream_t s) {
                  check((*stager)->enqueue(a, s), "enqueue (capture)");
                }));
              }
            }
            int replay = 0;
            auto us = engram::probe::time_replays({0}, {stream}, replays, [&](size_t) {
              const int set = replay++ % kIdSets;
              if (graph) {
                check(cudaGraphLaunch(graphs[static_cast<size_t>(set)], stream), "cudaGraphLaunch");
              } else {
                a.ids = ids + set * max_slots;
                check((*stager)->enqueue(a, stream), "enqueue");
              }
            });
            for (auto g : graphs) cudaGraphExecDestroy(g);
            const double p50 = engram::probe::median(us);
            std::printf("%-9s %5lu %-8s %-6s %8ld %10.1f %10.2f %10.1f %10.2f %10.2f\n", kind.c_str(),
                        static_cast<unsigned long>(gib), fmt::format("st{}{}d{}", threads, graph ? "g" : "", static_cast<int>(direct * 100)).c_str(),
                        "fresh", static_cast<long>(tokens), p50, row_bytes_total / (p50 * 1e3), h2d_us,
                        row_bytes_total / (h2d_us * 1e3), (row_bytes_total / (p50 * 1e3)) / (row_bytes_total / (h2d_us * 1e3)));
            std::fflush(stdout);
          }
        }
        // "runtime": kernels::gather_range, the kernel the runtime's host lookup
        // runs below CudaComputeOptions::staged_rows_min (it dequantises).
        for (const char* kernel : {"plain", "runtime", "bounded", "four"}) {
          for (int fresh = 0; fresh < 2; ++fresh) {
            const std::string name = kernel;
            if (only_plain && ((name != "plain" && name != "runtime") || !fresh)) continue;
            engram::kernels::HostRowsArgs range;
            range.tokens = tokens;
            range.ids_per_token = kHeads;
            range.head_begin = 0;
            range.head_count = kHeads;
            range.first_row = 0;
            range.row_count = rows;
            range.layout = engram::kernels::RowLayout{engram::RowFormat::kFp8E4M3Ue8m0, 256, kRowBytes,
                                                      engram::ScaleByteRule::kVllm};
            range.out = reinterpret_cast<uint16_t*>(out);
            int replay = 0;
            auto us = engram::probe::time_replays({0}, {stream}, replays, [&](size_t) {
              const int64_t* set = ids + (fresh ? (replay++ % kIdSets) * max_slots : 0);
              const std::string k = kernel;
              if (k == "plain") {
                plain_rows<<<static_cast<unsigned>((slots * 32 + 255) / 256), 256, 0, stream>>>(set, slots, t.device, out);
              } else if (k == "runtime") {
                range.ids = set;
                check(engram::kernels::gather_range(range, t.device, stream), "gather_range");
              } else if (k == "bounded") {
                bounded_rows<<<sms * 2, 256, 0, stream>>>(set, slots, t.device, out);
              } else {
                four_rows<<<static_cast<unsigned>(((slots + 3) / 4 * 32 + 255) / 256), 256, 0, stream>>>(set, slots, t.device, out);
              }
            });
            const double p50 = engram::probe::median(us);
            std::printf("%-9s %5lu %-8s %-6s %8ld %10.1f %10.2f %10.1f %10.2f %10.2f\n", kind.c_str(),
                        static_cast<unsigned long>(gib), kernel, fresh ? "fresh" : "same", static_cast<long>(tokens),
                        p50, row_bytes_total / (p50 * 1e3), h2d_us, row_bytes_total / (h2d_us * 1e3),
                        (row_bytes_total / (p50 * 1e3)) / (row_bytes_total / (h2d_us * 1e3)));
            std::fflush(stdout);
          }
        }
      }
      destroy(t);
    }
  }
  return 0;
}
