// Lookups beside compute (issue "The runtime at the kernels' speed", item 5):
// both V4.1 layers' device lookups (kernels::gather_peer, the device_peer
// kernel, over one table per layer on this GPU) on a side stream while a
// compute-bound bf16 matrix product (cuBLAS, n x n x n) runs on the main
// stream, as the engines prefetch the next layer's rows during a step. For
// 1, 64 and 256 tokens it prints the product's time alone and beside the
// lookups (the slowdown), and the lookup pair's latency alone and beside
// the product, in two loads: one lookup pair a product (an engine's
// prefetch: one step's rows beside one step's compute) and pairs back to
// back while the products run (the worst case). Three settings: the side
// stream at the default priority (CUDA's lowest, as the main stream), at
// the highest, and the product told to leave SMs free for the lookups
// (cublasSetSmCountTarget: all but `spare_sms`). Alone and beside batches
// alternate, so clock drift under a sustained product falls on both.
// Sampled output slots are checked against the fill rule.
// `lookup_beside_compute_probe [table_gib] [n] [spare_sms]`: table_gib per
// layer (default 8: rows past L2), n the product's size (default 8192),
// spare_sms (default 4). Medians of event-timed runs; a program, not a test.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/base/bf16.h"
#include "core/model/row_format.h"
#include "core/model/table_spec.h"
#include "kernels/gather_kernels.h"
#include "operator_checks/bench_kernels.h"

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "lookup_beside_compute_probe: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}
void check_blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "lookup_beside_compute_probe: %s: cuBLAS status %d\n", what, static_cast<int>(s));
  std::exit(1);
}
void check(const engram::Status& s, const char* what) {
  if (s.is_ok()) return;
  std::fprintf(stderr, "lookup_beside_compute_probe: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

template <typename T>
void device_alloc(T** p, size_t bytes, const char* what) {
  check_cuda(cudaMalloc(reinterpret_cast<void**>(p), bytes), what);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One layer's table on this GPU and a token count's ids and output.
struct Layer {
  engram::TableSpec spec;
  int64_t rows = 0;
  uint8_t* table = nullptr;
  int64_t* starts = nullptr;   // {0, rows}
  const void** bases = nullptr;
};

struct Lookup {
  int64_t* ids = nullptr;
  uint16_t* out = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("lookup_beside_compute_probe: no GPU; nothing measured\n");
    return 0;
  }
  const double table_gib = argc > 1 ? std::atof(argv[1]) : 8.0;
  const int n = argc > 2 ? std::atoi(argv[2]) : 8192;
  const int spare_sms = argc > 3 ? std::atoi(argv[3]) : 4;
  if (!(table_gib > 0 && table_gib <= 60) || n < 256 || n > 32768 || n % 256 != 0 || spare_sms < 1 || spare_sms > 64) {
    std::fprintf(stderr, "lookup_beside_compute_probe: table_gib '%s' must be in (0, 60], n '%s' a multiple of 256 "
                 "in 256..32768 and spare_sms 1..64, e.g. %s 8 8192 4\n", argc > 1 ? argv[1] : "",
                 argc > 2 ? argv[2] : "", argv[0]);
    return 2;
  }
  auto model = engram::model_preset("deepseek-v4.1-flash");
  check(model.status(), "model");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "device properties");

  // Two layers' tables: each the V4.1 layer's rows and heads, cut to
  // table_gib (the rows past L2 either way), filled on the GPU.
  std::vector<Layer> layers(2);
  for (int l = 0; l < 2; ++l) {
    Layer& L = layers[static_cast<size_t>(l)];
    L.spec = model->tables.at(static_cast<size_t>(l));
    L.rows = std::min<int64_t>(L.spec.row_count(),
                               static_cast<int64_t>(table_gib * 1073741824.0 / static_cast<double>(L.spec.row_bytes())));
    device_alloc(&L.table, static_cast<size_t>(L.rows) * L.spec.row_bytes(), "table");
    engram::operator_checks::ShardFillArgs fill;
    fill.shard = L.table;
    fill.rows = L.rows;
    fill.row_bytes = L.spec.row_bytes();
    fill.dim = L.spec.dim;
    fill.seed = 7 + static_cast<uint64_t>(l);
    check(engram::operator_checks::fill_shard(fill, nullptr), "fill");
    const int64_t starts[2] = {0, L.rows};
    device_alloc(&L.starts, sizeof(starts), "starts");
    check_cuda(cudaMemcpy(L.starts, starts, sizeof(starts), cudaMemcpyHostToDevice), "starts");
    const void* base = L.table;
    device_alloc(&L.bases, sizeof(base), "bases");
    check_cuda(cudaMemcpy(L.bases, &base, sizeof(base), cudaMemcpyHostToDevice), "bases");
  }

  // The product: C = A x B, bf16 in and out, fp32 accumulation, random data.
  const size_t elems = static_cast<size_t>(n) * static_cast<size_t>(n);
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  device_alloc(&a, elems * 2, "A");
  device_alloc(&b, elems * 2, "B");
  device_alloc(&c, elems * 2, "C");
  {
    std::vector<__nv_bfloat16> host(elems);
    uint64_t x = 12345;
    for (auto& v : host) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      v = __float2bfloat16(static_cast<float>(static_cast<int>(x >> 40) % 2001 - 1000) / 1000.0f);
    }
    check_cuda(cudaMemcpy(a, host.data(), elems * 2, cudaMemcpyHostToDevice), "A");
    check_cuda(cudaMemcpy(b, host.data(), elems * 2, cudaMemcpyHostToDevice), "B");
  }
  cublasHandle_t blas;
  check_blas(cublasCreate(&blas), "create");
  cudaStream_t main_stream;
  check_cuda(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking), "main stream");
  check_blas(cublasSetStream(blas, main_stream), "set stream");
  const float one = 1.0f, zero = 0.0f;
  auto product = [&] {
    check_blas(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero,
                            c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "gemm");
  };

  int priority_low = 0, priority_high = 0;
  check_cuda(cudaDeviceGetStreamPriorityRange(&priority_low, &priority_high), "priorities");
  for (int i = 0; i < 5; ++i) product();  // warm-up: cuBLAS picks and loads its kernel
  check_cuda(cudaStreamSynchronize(main_stream), "warm-up");

  // The lookup pairs of each token count, captured once on a side stream
  // of each priority; their outputs checked against the fill rule.
  struct Side {
    const char* name;
    int priority;
    int sm_target;  // the product's cublasSetSmCountTarget, 0: all
    cudaStream_t stream = nullptr;
  };
  std::vector<Side> sides = {{"default priority (the lowest)", priority_low, 0},
                             {"highest priority", priority_high, 0},
                             {"default priority, product on all but the spare SMs", priority_low,
                              prop.multiProcessorCount - spare_sms}};
  for (Side& side : sides) check_cuda(cudaStreamCreateWithPriority(&side.stream, cudaStreamNonBlocking, side.priority), "side");
  const int token_counts[] = {1, 64, 256};
  std::vector<std::vector<Lookup>> lookups;
  for (const int tokens : token_counts) {
    auto& pair = lookups.emplace_back(2);
    for (int l = 0; l < 2; ++l) {
      const Layer& L = layers[static_cast<size_t>(l)];
      std::vector<int64_t> ids(static_cast<size_t>(tokens) * static_cast<size_t>(L.spec.head_count()));
      uint64_t x = 99 + static_cast<uint64_t>(tokens) * 7 + static_cast<uint64_t>(l);
      for (auto& id : ids) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        id = static_cast<int64_t>((x >> 17) % static_cast<uint64_t>(L.rows));
      }
      device_alloc(&pair[static_cast<size_t>(l)].ids, ids.size() * 8, "ids");
      check_cuda(cudaMemcpy(pair[static_cast<size_t>(l)].ids, ids.data(), ids.size() * 8, cudaMemcpyHostToDevice), "ids");
      device_alloc(&pair[static_cast<size_t>(l)].out, ids.size() * static_cast<size_t>(L.spec.dim) * 2, "out");
      check_cuda(cudaMemset(pair[static_cast<size_t>(l)].out, 0xab, ids.size() * static_cast<size_t>(L.spec.dim) * 2),
                 "poison");
    }
  }
  auto enqueue_pair = [&](size_t t, cudaStream_t stream) {
    for (int l = 0; l < 2; ++l) {
      const Layer& L = layers[static_cast<size_t>(l)];
      engram::kernels::GatherPeerArgs g;
      g.ids = lookups[t][static_cast<size_t>(l)].ids;
      g.tokens = token_counts[t];
      g.heads = L.spec.head_count();
      g.shard_starts = L.starts;
      g.shard_bases = L.bases;
      g.shard_count = 1;
      g.layout = engram::kernels::row_layout(L.spec);
      g.out = lookups[t][static_cast<size_t>(l)].out;
      check(engram::kernels::gather_peer(g, stream), "gather_peer");
    }
  };
  // graphs[side][t]
  std::vector<std::vector<cudaGraphExec_t>> graphs(sides.size());
  for (size_t s = 0; s < sides.size(); ++s)
    for (size_t t = 0; t < std::size(token_counts); ++t) {
      cudaGraph_t graph;
      check_cuda(cudaStreamBeginCapture(sides[s].stream, cudaStreamCaptureModeThreadLocal), "capture");
      enqueue_pair(t, sides[s].stream);
      check_cuda(cudaStreamEndCapture(sides[s].stream, &graph), "end capture");
      cudaGraphExec_t exec;
      check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      check_cuda(cudaGraphDestroy(graph), "destroy");
      graphs[s].push_back(exec);
    }
  for (size_t t = 0; t < std::size(token_counts); ++t) {
    check_cuda(cudaGraphLaunch(graphs[0][t], sides[0].stream), "launch");
    check_cuda(cudaStreamSynchronize(sides[0].stream), "sync");
    for (int l = 0; l < 2; ++l) {
      const Layer& L = layers[static_cast<size_t>(l)];
      const size_t slots = static_cast<size_t>(token_counts[t]) * static_cast<size_t>(L.spec.head_count());
      std::vector<int64_t> ids(slots);
      std::vector<uint16_t> out(slots * static_cast<size_t>(L.spec.dim)), expected(static_cast<size_t>(L.spec.dim));
      check_cuda(cudaMemcpy(ids.data(), lookups[t][static_cast<size_t>(l)].ids, slots * 8, cudaMemcpyDeviceToHost), "ids");
      check_cuda(cudaMemcpy(out.data(), lookups[t][static_cast<size_t>(l)].out, out.size() * 2, cudaMemcpyDeviceToHost),
                 "out");
      std::vector<std::byte> row(L.spec.row_bytes());
      for (size_t k = 0; k < 8; ++k) {
        const size_t slot = (k * 7919) % slots;
        for (uint64_t w = 0; w < L.spec.row_bytes() / 8; ++w) {
          const uint64_t word =
              engram::operator_checks::fill_word(7 + static_cast<uint64_t>(l), ids[slot], w, L.spec.row_bytes(), L.spec.dim);
          std::memcpy(row.data() + 8 * w, &word, 8);
        }
        engram::dequantize_row(L.spec, row, expected);
        for (int v = 0; v < L.spec.dim; ++v) {
          const uint16_t got = out[slot * static_cast<size_t>(L.spec.dim) + static_cast<size_t>(v)];
          if (!engram::bf16_same(expected[static_cast<size_t>(v)], got)) {
            std::fprintf(stderr, "lookup_beside_compute_probe: layer %d, %d tokens, slot %zu (row %ld) value %d: %#06x, "
                         "the fill rule %#06x\n", l, token_counts[t], slot, static_cast<long>(ids[slot]), v, got,
                         expected[static_cast<size_t>(v)]);
            return 1;
          }
        }
      }
    }
  }

  // Event-timed spans: products on the main stream, pairs on a side stream.
  constexpr int kBatch = 6, kRounds = 5, kPairsMax = 4096;
  std::vector<cudaEvent_t> product_marks(2 * kBatch), pair_marks(2 * kPairsMax);
  for (auto& e : product_marks) check_cuda(cudaEventCreate(&e), "event");
  for (auto& e : pair_marks) check_cuda(cudaEventCreate(&e), "event");
  auto spans_us = [](const std::vector<cudaEvent_t>& marks, int count, std::vector<double>& into) {
    for (int i = 0; i < count; ++i) {
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, marks[2 * static_cast<size_t>(i)], marks[2 * static_cast<size_t>(i) + 1]),
                 "elapsed");
      into.push_back(1000.0 * ms);
    }
  };
  // A batch of products, each launching (pairs_each > 0) that many lookup
  // pairs on `side` as it starts; back_to_back: pairs queued for the whole
  // batch instead. Returns how many pairs it timed.
  auto batch = [&](cudaStream_t side, cudaGraphExec_t pair, int pairs_each, int back_to_back_pairs,
                   std::vector<double>& product_us, std::vector<double>& pair_us) {
    check_cuda(cudaDeviceSynchronize(), "sync");
    int timed = 0;
    if (back_to_back_pairs > 0) {
      check_cuda(cudaEventRecord(product_marks[0], main_stream), "record");
      check_cuda(cudaStreamWaitEvent(side, product_marks[0], 0), "wait");
      for (; timed < back_to_back_pairs; ++timed) {
        check_cuda(cudaEventRecord(pair_marks[2 * static_cast<size_t>(timed)], side), "record");
        check_cuda(cudaGraphLaunch(pair, side), "launch");
        check_cuda(cudaEventRecord(pair_marks[2 * static_cast<size_t>(timed) + 1], side), "record");
      }
    }
    for (int i = 0; i < kBatch; ++i) {
      check_cuda(cudaEventRecord(product_marks[2 * static_cast<size_t>(i)], main_stream), "record");
      for (int k = 0; k < pairs_each; ++k, ++timed) {
        check_cuda(cudaStreamWaitEvent(side, product_marks[2 * static_cast<size_t>(i)], 0), "wait");
        check_cuda(cudaEventRecord(pair_marks[2 * static_cast<size_t>(timed)], side), "record");
        check_cuda(cudaGraphLaunch(pair, side), "launch");
        check_cuda(cudaEventRecord(pair_marks[2 * static_cast<size_t>(timed) + 1], side), "record");
      }
      product();
      check_cuda(cudaEventRecord(product_marks[2 * static_cast<size_t>(i) + 1], main_stream), "record");
    }
    check_cuda(cudaDeviceSynchronize(), "sync");
    spans_us(product_marks, kBatch, product_us);
    spans_us(pair_marks, timed, pair_us);
  };

  std::printf("lookups beside a bf16 product, %s, %d SMs; product %d x %d x %d (cuBLAS); two V4.1 layers' tables of "
              "%.1f GiB each (gather_peer: the device_peer kernel); medians of %d products a cell, alone and beside "
              "in alternating batches\n",
              prop.name, prop.multiProcessorCount, n, n, n, table_gib, kBatch * kRounds);
  std::printf("| side stream | tokens | load | product us alone | product us beside | slowdown %% | lookup pair us alone "
              "| lookup pair us beside |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  bool ok = true;
  double best_slowdown_max = 1e9;
  for (size_t s = 0; s < sides.size(); ++s) {
    check_blas(cublasSetSmCountTarget(blas, sides[s].sm_target), "SM count target");
    double slowdown_max = 0;
    for (size_t t = 0; t < std::size(token_counts); ++t) {
      // The pair alone on this side stream.
      std::vector<double> pair_alone_us, unused;
      for (int i = 0; i < 20; ++i) check_cuda(cudaGraphLaunch(graphs[s][t], sides[s].stream), "warm");
      check_cuda(cudaDeviceSynchronize(), "sync");
      for (int i = 0; i < 200; ++i) {
        check_cuda(cudaEventRecord(pair_marks[2 * static_cast<size_t>(i)], sides[s].stream), "record");
        check_cuda(cudaGraphLaunch(graphs[s][t], sides[s].stream), "launch");
        check_cuda(cudaEventRecord(pair_marks[2 * static_cast<size_t>(i) + 1], sides[s].stream), "record");
      }
      check_cuda(cudaDeviceSynchronize(), "sync");
      spans_us(pair_marks, 200, pair_alone_us);
      const double pair_alone = median(pair_alone_us);
      for (const bool back_to_back : {false, true}) {
        std::vector<double> alone_us, beside_us, pair_us;
        for (int round = 0; round < kRounds; ++round) {
          batch(sides[s].stream, graphs[s][t], 0, 0, alone_us, unused);
          const double product_us = alone_us.empty() ? 1000.0 : median(alone_us);
          const int back_pairs =
              back_to_back ? std::min(kPairsMax, static_cast<int>(kBatch * product_us / std::max(pair_alone, 1.0)) + 1) : 0;
          batch(sides[s].stream, graphs[s][t], back_to_back ? 0 : 1, back_pairs, beside_us, pair_us);
        }
        const double alone = median(alone_us), beside = median(beside_us);
        const double slowdown = 100.0 * (beside / alone - 1.0);
        if (!back_to_back) slowdown_max = std::max(slowdown_max, slowdown);
        std::printf("| %s | %d | %s | %.1f | %.1f | %.2f | %.2f | %.2f |\n", sides[s].name, token_counts[t],
                    back_to_back ? "back to back" : "one pair a product", alone, beside, slowdown, pair_alone,
                    median(pair_us));
      }
    }
    best_slowdown_max = std::min(best_slowdown_max, slowdown_max);
  }
  ok = best_slowdown_max <= 3.0;
  check_blas(cublasSetSmCountTarget(blas, 0), "SM count target");
  std::printf("target: at most 3%% slowdown of the product with one lookup pair a product at 1, 64 and 256 tokens: "
              "%.2f%% at worst in the best setting, %s\n", best_slowdown_max, ok ? "MET" : "NOT MET");
  // What the spare SMs cost the product by themselves (the table's last
  // setting compares the product on all but the spare SMs with and without
  // lookups beside, so this cost is not in its slowdown): alone on every SM
  // against alone on all but the spare ones, batches alternating.
  {
    const int target = prop.multiProcessorCount - spare_sms;
    std::vector<double> all_us, fewer_us, unused;
    for (int round = 0; round < 2 * kRounds; ++round) {
      check_blas(cublasSetSmCountTarget(blas, 0), "SM count target");
      batch(sides[0].stream, graphs[0][0], 0, 0, all_us, unused);
      check_blas(cublasSetSmCountTarget(blas, target), "SM count target");
      batch(sides[0].stream, graphs[0][0], 0, 0, fewer_us, unused);
    }
    check_blas(cublasSetSmCountTarget(blas, 0), "SM count target");
    const double all = median(all_us), fewer = median(fewer_us);
    std::printf("the spare SMs' own cost: the product alone on all %d SMs %.1f us, on %d SMs %.1f us: %.2f%% "
                "(medians of %d products each, batches alternating)\n",
                prop.multiProcessorCount, all, target, fewer, 100.0 * (fewer / all - 1.0), kBatch * 2 * kRounds);
  }
  for (auto& e : product_marks) cudaEventDestroy(e);
  for (auto& e : pair_marks) cudaEventDestroy(e);
  for (auto& per_side : graphs)
    for (cudaGraphExec_t g : per_side) cudaGraphExecDestroy(g);
  for (Side& side : sides) cudaStreamDestroy(side.stream);
  for (auto& pair : lookups)
    for (Lookup& L : pair) {
      cudaFree(L.ids);
      cudaFree(L.out);
    }
  cublasDestroy(blas);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  for (auto& L : layers) {
    cudaFree(L.table);
    cudaFree(L.starts);
    cudaFree(L.bases);
  }
  return 0;
}
