// The device request hasher's step (DeviceRequestHasher::enqueue_extend:
// hash a ragged batch after the slots' histories and advance them) beside a
// plain kernel that reads the same tokens and writes the same number of ids
// (operator_checks/bench_kernels.h plain_ids), both captured into a graph
// and timed by the bench's method (CudaDeviceCompute's graphs:
// backends/cuda/graph_timing.h), in the same run; and an empty kernel's
// graph, the fixed cost of a one-kernel step; and the hasher's graph again
// after a fully padded step is staged (its cost without requests: the same
// graph replayed over new inputs). V4.1 layer 1's hashing (24
// heads, max n-gram 4), every 7th token DEAD, 64 slots. A table of median
// microseconds and the hasher / plain ratio; the target is 1.2 at 8,192
// tokens; beside it, the plain writer plus each id's modulo by its head's
// prime (the arithmetic floor any hasher pays on top of the plain writer).
// `device_hasher_probe [replays] [tokens]`: with `tokens`, only the
// shapes of that many tokens (a profiler's run); a program, not a test.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device_compute.h"
#include "core/lookup/device_request_hasher.h"
#include "core/model/hashing.h"
#include "core/model/table_spec.h"
#include "operator_checks/bench_kernels.h"

namespace engram {
namespace {

void check(const Status& s, const char* what) {
  if (s.is_ok()) return;
  std::fprintf(stderr, "device_hasher_probe: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

double median_us(DeviceGraph& graph, int replays) {
  auto us = graph.time(/*warmup=*/20, replays);
  check(us.status(), "timing");
  std::vector<double> v = *us;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Shape {
  int64_t tokens;
  int requests;
};

}  // namespace
}  // namespace engram

using namespace engram;

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("device_hasher_probe: no GPU; nothing measured\n");
    return 0;
  }
  int replays = 200;
  if (argc > 1) {
    replays = std::atoi(argv[1]);
    if (replays < 1 || replays > 100000) {
      std::fprintf(stderr, "device_hasher_probe: replays '%s' must be 1..100000, e.g. %s 200\n", argv[1], argv[0]);
      return 2;
    }
  }
  auto model = model_preset("deepseek-v4.1-flash");
  check(model.status(), "model");
  auto hasher = TableHasher::create(*model, 0);
  check(hasher.status(), "hasher");
  const int heads = hasher->head_count();
  const int64_t multiplier = hash_multipliers(*model, 0).at(0);
  // The heads' records on the device, for the plain writer plus modulo.
  const std::vector<DeviceHashHead> head_records = device_hash_heads(*hasher);
  DeviceHashHead* head_words = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&head_words), head_records.size() * sizeof(DeviceHashHead)) != cudaSuccess ||
      cudaMemcpy(head_words, head_records.data(), head_records.size() * sizeof(DeviceHashHead), cudaMemcpyHostToDevice) !=
          cudaSuccess) {
    std::fprintf(stderr, "device_hasher_probe: could not upload the heads' records\n");
    return 1;
  }
  cuda::CudaDeviceCompute compute(0);
  constexpr int kSlots = 64;
  int64_t only_tokens = 0;
  if (argc > 2) {
    only_tokens = std::atoll(argv[2]);
    if (only_tokens < 1) {
      std::fprintf(stderr, "device_hasher_probe: tokens '%s' must be >= 1, e.g. %s 200 8192\n", argv[2], argv[0]);
      return 2;
    }
  }
  const Shape shapes[] = {{1, 1}, {64, 64}, {1024, 64}, {8192, 64}, {8192, 1}};

  auto empty = compute.capture([](StreamRef s) {
    return operator_checks::empty_kernel(reinterpret_cast<cudaStream_t>(s.handle));
  });
  check(empty.status(), "capture empty kernel");
  const double empty_us = median_us(**empty, replays);

  std::printf("device hasher vs plain id writer, GPU 0, V4.1 layer 1 (%d heads, max n-gram %d), %d replays, median us\n",
              heads, hasher->max_order(), replays);
  std::printf("| tokens | requests | ids | hasher us | plain us | ratio | plain + modulo us | its ratio | hasher ids/us "
              "| padded step us |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  double ratio_at_8192 = 0;
  for (const Shape& shape : shapes) {
    if (only_tokens != 0 && shape.tokens != only_tokens) continue;
    DeviceRequestHasherOptions options;
    options.slot_count = kSlots;
    options.tokens_max = shape.tokens;
    auto h = DeviceRequestHasher::create(compute, *hasher, options);
    check(h.status(), "device hasher");
    // The requests' runs split the tokens evenly (the first ones one longer).
    std::vector<int64_t> tokens(static_cast<size_t>(shape.tokens));
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = i % 7 == 6 ? kDeadId : static_cast<int64_t>((i * 2654435761u) % 99'092);
    std::vector<RequestRun> runs;
    int64_t at = 0;
    for (int r = 0; r < shape.requests; ++r) {
      const int64_t n = shape.tokens / shape.requests + (r < shape.tokens % shape.requests ? 1 : 0);
      check((*h)->begin(r, std::vector<int64_t>{5, 6, 7}), "begin");
      runs.push_back(RequestRun{r, at, n});
      at += n;
    }
    check((*h)->stage_extend(tokens, runs), "stage");
    DeviceRequestHasher* device = h->get();
    auto hash_graph = compute.capture([&](StreamRef s) { return device->enqueue_extend(s, shape.tokens); });
    check(hash_graph.status(), "capture hasher");
    auto plain_out = compute.allocate(static_cast<uint64_t>(shape.tokens) * static_cast<uint64_t>(heads) * 8);
    check(plain_out.status(), "allocate");
    const auto* token_words = reinterpret_cast<const int64_t*>(device->tokens());
    auto* id_words = reinterpret_cast<int64_t*>(*plain_out);
    auto plain_graph = compute.capture([&](StreamRef s) {
      return operator_checks::plain_ids(token_words, shape.tokens, heads, id_words,
                                        reinterpret_cast<cudaStream_t>(s.handle));
    });
    check(plain_graph.status(), "capture plain");
    // The plain writer plus each id's modulo by its head's prime: the
    // arithmetic floor no hasher goes under, beside the plain writer.
    auto modulo_graph = compute.capture([&](StreamRef s) {
      return operator_checks::plain_modulo_ids(token_words, shape.tokens, head_words, heads, multiplier, id_words,
                                               reinterpret_cast<cudaStream_t>(s.handle));
    });
    check(modulo_graph.status(), "capture plain + modulo");
    const double hash_us = median_us(**hash_graph, replays);
    const double plain_us = median_us(**plain_graph, replays);
    const double modulo_us = median_us(**modulo_graph, replays);
    check((*h)->check_device_errors(), "device error word");
    // The same graph over a fully padded step (no runs: every id DEAD, no
    // history read or written): the step's cost without its requests.
    check((*h)->stage_extend(tokens, {}), "stage padded");
    const double padded_us = median_us(**hash_graph, replays);
    const double ratio = hash_us / plain_us;
    if (shape.tokens == 8192 && shape.requests == kSlots) ratio_at_8192 = ratio;
    std::printf("| %ld | %d | %ld | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.2f |\n", static_cast<long>(shape.tokens),
                shape.requests, static_cast<long>(shape.tokens * heads), hash_us, plain_us, ratio, modulo_us,
                modulo_us / plain_us, static_cast<double>(shape.tokens * heads) / hash_us, padded_us);
    hash_graph->reset();
    modulo_graph->reset();
    plain_graph->reset();
    check(compute.free(*plain_out), "free");
    check((*h)->free(), "free hasher");
  }
  cudaFree(head_words);
  std::printf("empty kernel graph: %.2f us (the fixed cost of a one-kernel step)\n", empty_us);
  std::printf("target: hasher within 1.2x of the plain kernel at 8192 tokens (64 requests): %.2fx, %s\n", ratio_at_8192,
              ratio_at_8192 <= 1.2 ? "MET" : "NOT MET");
  return 0;
}
