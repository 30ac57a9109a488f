// Where a peer gather's time goes, on 2 GPUs looking up at once (as DP ranks
// do): the plain kernel of docs/design.md's anchors (section 8), the same with the shard table
// read from memory, with the FP8 dequantisation, and with each row read by
// one 17-lane 16-byte load instead of a data load plus a scale load; then
// gather_peer itself and the copies the bench's floor is built from. Each
// variant is one kernel per captured graph, timed like `engramlab bench`.
// cudaMalloc + peer access (the probe graph_timing_probe shows VMM memory
// times the same). Prints a table of median microseconds.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/probe_support.cuh"
#include "operator_checks/bench_kernels.h"
#include "kernels/gather_kernels.h"
#include "kernels/row_dequant.cuh"

namespace {

constexpr int kHeads = 24;
constexpr uint64_t kShardBytes = 8ull << 30;
constexpr int64_t kRowsPerShard = static_cast<int64_t>(kShardBytes / 264);
constexpr unsigned kFull = 0xffffffffu;

#define CK(x) engram::probe::check((x), #x)
void check_status(const engram::Status& s, const char* what) { engram::probe::check(s, what); }

struct Shards {
  const int64_t* starts;      // device, 3 entries
  const void* const* bases;   // device, 2 entries
  const uint8_t* base0;       // the same, by value
  const uint8_t* base1;
};

// kTable: owner and base from the device table (lane loads + ballot, as
// gather_peer does) instead of by-value pointers. kDequant: FP8 -> bf16 as
// gather_peer; else the raw bytes widened. kOneLoad: lanes 0..16 each read
// one aligned 16 B chunk of the row's 272 B window (one load instruction per
// row); else lane l reads data word l and every lane the scale word.
template <bool kTable, bool kDequant, bool kOneLoad, bool kStream, bool kHw = false>
__global__ void __launch_bounds__(256) probe_gather(const int64_t* __restrict__ ids, int64_t slots, Shards s,
                                                    uint4* __restrict__ out) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (slot >= slots) return;
  int64_t id = __ldg(ids + slot);
  const uint8_t* row = nullptr;
  if constexpr (kTable) {
    int64_t start = INT64_MAX;
    uint64_t base = 0;
    if (lane <= 2) start = __ldg(s.starts + lane);
    if (lane < 2) base = __ldg(reinterpret_cast<const unsigned long long*>(s.bases) + lane);
    const int64_t count = __shfl_sync(kFull, start, 2);
    const unsigned below = __ballot_sync(kFull, lane < 2 && start <= id);
    const int owner = below == 0 ? 0 : 31 - __clz(below);
    const int64_t owner_start = __shfl_sync(kFull, start, owner);
    const uint64_t owner_base = __shfl_sync(kFull, base, owner);
    if (id >= 0 && id < count) row = reinterpret_cast<const uint8_t*>(owner_base) + (id - owner_start) * 264;
  } else {
    if (id >= 0 && id < 2 * kRowsPerShard) row = id < kRowsPerShard ? s.base0 + id * 264 : s.base1 + (id - kRowsPerShard) * 264;
  }
  uint4* dst = out + slot * 32 + lane;
  if (row == nullptr) {
    *dst = make_uint4(0, 0, 0, 0);
    return;
  }
  uint2 data, scales;
  if constexpr (kOneLoad) {
    const uint8_t* window = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(row) & ~uintptr_t{15});
    const int odd = (reinterpret_cast<uintptr_t>(row) >> 3) & 1;
    uint4 c = make_uint4(0, 0, 0, 0);
    if (lane < 17) c = __ldg(reinterpret_cast<const uint4*>(window) + lane);
    const int word = lane + odd;  // 8-byte word of the window this lane's data starts at
    const uint32_t x = __shfl_sync(kFull, c.x, word >> 1), y = __shfl_sync(kFull, c.y, word >> 1);
    const uint32_t z = __shfl_sync(kFull, c.z, word >> 1), w = __shfl_sync(kFull, c.w, word >> 1);
    data = (word & 1) == 0 ? make_uint2(x, y) : make_uint2(z, w);
    const uint32_t sx = __shfl_sync(kFull, odd ? c.z : c.x, 16), sy = __shfl_sync(kFull, odd ? c.w : c.y, 16);
    scales = make_uint2(sx, sy);
  } else {
    data = __ldg(reinterpret_cast<const uint2*>(row) + lane);
    scales = __ldg(reinterpret_cast<const uint2*>(row + 256));
  }
  uint4 value;
  if constexpr (kHw) {
    const int block = lane >> 2;
    const uint32_t scale_word = block < 4 ? scales.x : scales.y;
    const float scale = engram::kernels::device::e8m0_scale((scale_word >> (8 * (block & 3))) & 0xffu, {});
    const uint2 low = engram::kernels::device::dequant_fp8x4(data.x, scale);
    const uint2 high = engram::kernels::device::dequant_fp8x4(data.y, scale);
    value = make_uint4(low.x, low.y, high.x, high.y);
  } else if constexpr (kDequant) {
    const int block = lane >> 2;
    const uint32_t scale_word = block < 4 ? scales.x : scales.y;
    const float scale = engram::kernels::device::e8m0_scale((scale_word >> (8 * (block & 3))) & 0xffu, {});
    uint32_t v[8];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      v[b] = engram::kernels::device::dequant_fp8((data.x >> (8 * b)) & 0xffu, scale);
      v[b + 4] = engram::kernels::device::dequant_fp8((data.y >> (8 * b)) & 0xffu, scale);
    }
    value = make_uint4(v[0] | (v[1] << 16), v[2] | (v[3] << 16), v[4] | (v[5] << 16), v[6] | (v[7] << 16));
  } else {
    value = make_uint4(data.x ^ scales.x, data.y ^ scales.y, data.x, data.y);
  }
  if constexpr (kStream) {
    __stcs(dst, value);
  } else {
    *dst = value;
  }
}

// Remote-only granularity: each warp reads the kBytes-aligned window (of
// kBytes) that holds row `ids[slot]` of the peer's shard, and writes 4 bytes.
// If 32-byte windows cost what 64-byte ones do, NVLink moves 64-byte units.
template <int kBytes, int kOffset = 0>
__global__ void __launch_bounds__(256) window_read(const int64_t* __restrict__ ids, int64_t slots,
                                                   const uint8_t* peer, uint32_t* __restrict__ out) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (slot >= slots) return;
  const int64_t id = __ldg(ids + slot) % kRowsPerShard;
  const uint8_t* window = reinterpret_cast<const uint8_t*>(
      (reinterpret_cast<uintptr_t>(peer + id * 264) & ~static_cast<uintptr_t>(255)) + kOffset);
  uint2 v = make_uint2(0, 0);
  if (lane < kBytes / 8) v = __ldg(reinterpret_cast<const uint2*>(window) + lane);
  uint32_t x = v.x ^ v.y;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(kFull, x, o);
  if (lane == 0) out[slot] = x;
}

struct Gpu {
  cudaStream_t stream = nullptr;
  uint8_t* shard = nullptr;
  int64_t* starts = nullptr;
  void** bases = nullptr;
  int64_t* ids = nullptr;
  uint4* out = nullptr;
  Shards shards{};
};

// One graph per GPU of what `enqueue(g, stream)` enqueues; both launched per
// replay; GPU 0's events; median us.
double time_both(std::vector<Gpu>& gpus, int replays, const std::function<void(int, cudaStream_t)>& enqueue) {
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  std::vector<cudaGraphExec_t> execs;
  for (size_t g = 0; g < gpus.size(); ++g) {
    CK(cudaSetDevice(static_cast<int>(g)));
    devices.push_back(static_cast<int>(g));
    streams.push_back(gpus[g].stream);
    execs.push_back(engram::probe::capture(gpus[g].stream, [&](cudaStream_t s) { enqueue(static_cast<int>(g), s); }));
  }
  const std::vector<double> us = engram::probe::time_replays(
      devices, streams, replays, [&](size_t g) { CK(cudaGraphLaunch(execs[g], streams[g])); });
  for (size_t g = 0; g < gpus.size(); ++g) {
    CK(cudaSetDevice(static_cast<int>(g)));
    cudaGraphExecDestroy(execs[g]);
  }
  return engram::probe::median(us);
}

template <bool kTable, bool kDequant, bool kOneLoad, bool kStream, bool kHw = false>
std::function<void(int, cudaStream_t)> variant(std::vector<Gpu>& gpus, int64_t slots) {
  return [&gpus, slots](int g, cudaStream_t s) {
    probe_gather<kTable, kDequant, kOneLoad, kStream, kHw>
        <<<static_cast<unsigned>((slots + 7) / 8), 256, 0, s>>>(gpus[g].ids, slots, gpus[g].shards, gpus[g].out);
  };
}

}  // namespace

int main(int argc, char** argv) {
  engram::probe::probe_name() = "peer_gather_probe";
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    std::printf("peer_gather_probe: needs 2 GPUs; nothing measured\n");
    return 0;
  }
  const int replays = engram::probe::replays_from_args(argc, argv, 200);
  std::vector<Gpu> gpus(2);
  for (int g = 0; g < 2; ++g) {
    CK(cudaSetDevice(g));
    cudaError_t p = cudaDeviceEnablePeerAccess(1 - g, 0);
    if (p != cudaSuccess && p != cudaErrorPeerAccessAlreadyEnabled) CK(p);
    CK(cudaStreamCreateWithFlags(&gpus[g].stream, cudaStreamNonBlocking));
    CK(cudaMalloc(&gpus[g].shard, kShardBytes));
    engram::operator_checks::ShardFillArgs fill;
    fill.shard = gpus[g].shard;
    fill.first_row = g * kRowsPerShard;
    fill.rows = kRowsPerShard;
    fill.row_bytes = 264;
    fill.dim = 256;
    fill.seed = 7;
    check_status(engram::operator_checks::fill_shard(fill, nullptr), "fill");
    CK(cudaMalloc(&gpus[g].ids, 8192 * kHeads * 8));
    CK(cudaMalloc(&gpus[g].out, 8192 * kHeads * 512));
    CK(cudaMalloc(&gpus[g].starts, 3 * 8));
    CK(cudaMalloc(&gpus[g].bases, 2 * sizeof(void*)));
  }
  for (int g = 0; g < 2; ++g) {
    CK(cudaSetDevice(g));
    const int64_t starts[3] = {0, kRowsPerShard, 2 * kRowsPerShard};
    const void* bases[2] = {gpus[0].shard, gpus[1].shard};
    CK(cudaMemcpy(gpus[g].starts, starts, sizeof(starts), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gpus[g].bases, bases, sizeof(bases), cudaMemcpyHostToDevice));
    gpus[g].shards = Shards{gpus[g].starts, gpus[g].bases, gpus[0].shard, gpus[1].shard};
    CK(cudaDeviceSynchronize());
  }

  struct Variant {
    const char* name;
    std::function<std::function<void(int, cudaStream_t)>(int64_t)> make;
  };
  std::vector<Variant> variants = {
      {"plain: by-value bases, raw bytes, data + scale loads", [&](int64_t n) { return variant<false, false, false, false>(gpus, n); }},
      {"+ table from memory", [&](int64_t n) { return variant<true, false, false, false>(gpus, n); }},
      {"+ dequant (by-value bases)", [&](int64_t n) { return variant<false, true, false, false>(gpus, n); }},
      {"+ table + dequant", [&](int64_t n) { return variant<true, true, false, false>(gpus, n); }},
      {"one 17-lane load, raw", [&](int64_t n) { return variant<false, false, true, false>(gpus, n); }},
      {"one 17-lane load, dequant", [&](int64_t n) { return variant<false, true, true, false>(gpus, n); }},
      {"one 17-lane load, table + dequant", [&](int64_t n) { return variant<true, true, true, false>(gpus, n); }},
      {"one 17-lane load, table + dequant, .cs stores", [&](int64_t n) { return variant<true, true, true, true>(gpus, n); }},
      {"one 17-lane load, table + hardware-cvt dequant", [&](int64_t n) { return variant<true, false, true, false, true>(gpus, n); }},
      {"data + scale loads, table + hardware-cvt dequant", [&](int64_t n) { return variant<true, false, false, false, true>(gpus, n); }},
  };
  const std::vector<int64_t> sizes = {1, 16, 64, 256, 1024, 8192};
  std::vector<std::vector<double>> table(variants.size() + 3, std::vector<double>(sizes.size()));
  for (size_t si = 0; si < sizes.size(); ++si) {
    const int64_t tokens = sizes[si];
    const int64_t slots = tokens * kHeads;
    for (int g = 0; g < 2; ++g) {
      std::vector<int64_t> ids(slots);
      uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(tokens + 7 * g);
      for (auto& id : ids) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        id = static_cast<int64_t>(x % static_cast<uint64_t>(2 * kRowsPerShard));
      }
      CK(cudaSetDevice(g));
      CK(cudaMemcpy(gpus[g].ids, ids.data(), slots * 8, cudaMemcpyHostToDevice));
    }
    for (size_t v = 0; v < variants.size(); ++v) table[v][si] = time_both(gpus, replays, variants[v].make(slots));
    table[variants.size()][si] = time_both(gpus, replays, [&](int g, cudaStream_t s) {
      engram::kernels::GatherPeerArgs a;
      a.ids = gpus[g].ids;
      a.tokens = tokens;
      a.heads = kHeads;
      a.shard_starts = gpus[g].starts;
      a.shard_bases = gpus[g].bases;
      a.shard_count = 2;
      a.layout.format = engram::RowFormat::kFp8E4M3Ue8m0;
      a.layout.dim = 256;
      a.layout.row_bytes = 264;
      a.out = reinterpret_cast<uint16_t*>(gpus[g].out);
      check_status(engram::kernels::gather_peer(a, s), "gather_peer");
    });
    // The 17-lane dequant variants must give gather_peer's bits.
    for (int hw = 0; hw < 2; ++hw) {
      CK(cudaSetDevice(0));
      std::vector<uint4> mine(slots * 32), built(slots * 32);
      if (hw) variant<true, false, true, false, true>(gpus, slots)(0, gpus[0].stream);
      else variant<true, true, true, false>(gpus, slots)(0, gpus[0].stream);
      CK(cudaStreamSynchronize(gpus[0].stream));
      CK(cudaMemcpy(mine.data(), gpus[0].out, slots * 512, cudaMemcpyDeviceToHost));
      CK(cudaMemset(gpus[0].out, 0xab, slots * 512));
      engram::kernels::GatherPeerArgs a;
      a.ids = gpus[0].ids;
      a.tokens = tokens;
      a.heads = kHeads;
      a.shard_starts = gpus[0].starts;
      a.shard_bases = gpus[0].bases;
      a.shard_count = 2;
      a.layout.format = engram::RowFormat::kFp8E4M3Ue8m0;
      a.layout.dim = 256;
      a.layout.row_bytes = 264;
      a.out = reinterpret_cast<uint16_t*>(gpus[0].out);
      check_status(engram::kernels::gather_peer(a, gpus[0].stream), "gather_peer");
      CK(cudaStreamSynchronize(gpus[0].stream));
      CK(cudaMemcpy(built.data(), gpus[0].out, slots * 512, cudaMemcpyDeviceToHost));
      for (int64_t i = 0; i < slots * 32; ++i) {
        if (mine[i].x != built[i].x || mine[i].y != built[i].y || mine[i].z != built[i].z || mine[i].w != built[i].w) {
          std::fprintf(stderr, "peer_gather_probe: 17-lane variant (hw %d) differs from gather_peer at %lld tokens, chunk "
                       "%lld: %08x %08x %08x %08x vs %08x %08x %08x %08x\n", hw,
                       static_cast<long long>(tokens), static_cast<long long>(i), mine[i].x, mine[i].y, mine[i].z,
                       mine[i].w, built[i].x, built[i].y, built[i].z, built[i].w);
          return 1;
        }
      }
    }
    const uint64_t read = (slots * 264 + 15) / 16 * 16;
    for (int from_peer = 0; from_peer < 2; ++from_peer) {
      table[variants.size() + 1 + from_peer][si] = time_both(gpus, replays, [&](int g, cudaStream_t s) {
        const void* src = from_peer ? gpus[1 - g].shard : gpus[g].shard;
        check_status(engram::operator_checks::stream_copy(src, read, gpus[g].out, slots * 512, s), "copy");
      });
    }
  }
  // Granularity: 196,608 remote rows, windows of 32..256 B, with the L2
  // fetch granularity limit as found and at 32 B.
  {
    const int64_t slots = 8192 * kHeads;
    size_t found = 0;
    CK(cudaDeviceGetLimit(&found, cudaLimitMaxL2FetchGranularity));
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) {
        for (int g = 0; g < 2; ++g) {
          CK(cudaSetDevice(g));
          CK(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, 32));
        }
      }
      const std::string limit = pass == 0 ? "limit as found (" + std::to_string(found) + " B)" : "limit 32 B";
      auto win = [&](auto kernel_ptr, const char* bytes) {
        const double us = time_both(gpus, replays, [&, kernel_ptr](int g, cudaStream_t st) {
          kernel_ptr<<<static_cast<unsigned>((slots + 7) / 8), 256, 0, st>>>(
              gpus[g].ids, slots, gpus[1 - g].shard, reinterpret_cast<uint32_t*>(gpus[g].out));
        });
        std::printf("| remote windows of %s B, %s | %.2f us | %.1f GB/s of windows |\n", bytes, limit.c_str(), us,
                    slots * std::atof(bytes) / us / 1e3);
      };
      win(window_read<128>, "128");
      win(window_read<128, 32>, "128 (at +32)");
      win(window_read<128, 64>, "128 (at +64)");
      win(window_read<256>, "256");
      win(window_read<256, 32>, "256 (at +32)");
      win(window_read<256, 64>, "256 (at +64)");
      for (size_t v : {size_t{3}, size_t{5}, size_t{8}}) {
        std::printf("| %s at 8192 tokens, %s | %.2f us | |\n", variants[v].name, limit.c_str(),
                    time_both(gpus, replays, variants[v].make(slots)));
      }
      const uint64_t read = (slots * 264 + 15) / 16 * 16;
      std::printf("| peer copy at 8192 tokens, %s | %.2f us | |\n", limit.c_str(),
                  time_both(gpus, replays, [&](int g, cudaStream_t st) {
                    check_status(engram::operator_checks::stream_copy(gpus[1 - g].shard, read, gpus[g].out, slots * 512, st), "copy");
                  }));
    }
  }

  std::printf("| variant (2 GPUs at once, GPU 0 timed, p50 us) |");
  for (int64_t t : sizes) std::printf(" %lld |", static_cast<long long>(t));
  std::printf("\n| --- |");
  for (size_t i = 0; i < sizes.size(); ++i) std::printf(" ---: |");
  std::printf("\n");
  std::vector<std::string> names;
  for (const Variant& v : variants) names.push_back(v.name);
  names.push_back("gather_peer (as built)");
  names.push_back("local copy of the bytes");
  names.push_back("peer copy of the bytes");
  for (size_t v = 0; v < names.size(); ++v) {
    std::printf("| %s |", names[v].c_str());
    for (double us : table[v]) std::printf(" %.2f |", us);
    std::printf("\n");
  }
  return 0;
}
