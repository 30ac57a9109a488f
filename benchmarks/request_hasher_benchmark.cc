// The CPU request-state hasher's throughput (row ids a second, one core) on
// V4.1's table 0 (24 heads, orders 2-4), beside whole-sequence hashing of the
// same tokens (TableHasher::hash: the same per-token rule without slots or
// ragged runs) as the reference timed in the same run. Shapes: decode (many
// requests, one token each), chunked prefill and one long prefill.
// Prints Google Benchmark's table; items_per_second is row ids a second.
//
//   request_hasher_benchmark [--benchmark_filter=Decode]
#include <benchmark/benchmark.h>

#include <vector>

#include "core/base/splitmix64.h"
#include "core/model/hashing.h"
#include "core/model/request_hasher.h"
#include "core/model/table_spec.h"

namespace engram {
namespace {

TableHasher v41_hasher() {
  auto spec = model_preset("deepseek-v4.1-flash");
  ENGRAM_CHECK(spec.is_ok());
  auto h = TableHasher::create(*spec, 0);
  ENGRAM_CHECK(h.is_ok());
  return *h;
}

std::vector<int64_t> draw_tokens(size_t n, int64_t vocab) {
  std::vector<int64_t> t(n);
  uint64_t state = 17;
  for (size_t i = 0; i < n; ++i)
    t[i] = i % 97 == 96 ? kDeadId : static_cast<int64_t>(splitmix64_next(state) % static_cast<uint64_t>(vocab));
  return t;
}

// range(0) requests x range(1) tokens each, one extend a step.
void Extend(benchmark::State& state) {
  const TableHasher h = v41_hasher();
  const int requests = static_cast<int>(state.range(0));
  const int64_t per_request = state.range(1);
  auto rh = RequestHasher::create(h, requests);
  ENGRAM_CHECK(rh.is_ok());
  std::vector<RequestRun> runs;
  for (int r = 0; r < requests; ++r) {
    ENGRAM_CHECK(rh->begin(r).is_ok());
    runs.push_back({r, r * per_request, per_request});
  }
  const std::vector<int64_t> tokens = draw_tokens(static_cast<size_t>(requests * per_request), h.compressed_vocab_size());
  std::vector<int64_t> ids(tokens.size() * static_cast<size_t>(h.head_count()));
  for (auto _ : state) {
    const Status s = rh->extend(tokens, runs, ids);
    ENGRAM_CHECK(s.is_ok());
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ids.size()));
}

// The reference: the same tokens hashed as one whole sequence.
void WholeSequence(benchmark::State& state) {
  const TableHasher h = v41_hasher();
  const std::vector<int64_t> tokens = draw_tokens(static_cast<size_t>(state.range(0) * state.range(1)), h.compressed_vocab_size());
  std::vector<int64_t> ids(tokens.size() * static_cast<size_t>(h.head_count()));
  for (auto _ : state) {
    const Status s = h.hash(tokens, {}, ids);
    ENGRAM_CHECK(s.is_ok());
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ids.size()));
}

#define ENGRAM_SHAPES(fn)                                                                                  \
  BENCHMARK(fn)->ArgNames({"requests", "tokens"})->Args({256, 1})->Args({1024, 1})->Args({8, 1024})->Args({1, 8192})
ENGRAM_SHAPES(Extend);
ENGRAM_SHAPES(WholeSequence);

}  // namespace
}  // namespace engram

BENCHMARK_MAIN();
