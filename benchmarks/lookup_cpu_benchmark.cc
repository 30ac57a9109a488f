// CPU lookup throughput per placement, single process (groups of one, so the
// collectives are local copies), with V4.1 rows (256 FP8 values + 8 UE8M0
// scales = 264 B) over a table of a few hundred MB, at 1, 64, 1024 and 65536
// tokens; plus the machine's memory bandwidth measured in the same run, the
// ceiling a row gather can approach. Prints Google Benchmark's table.
//
//   lookup_cpu_benchmark [--benchmark_filter=Lookup/host_shared]
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "core/backend/collectives.h"
#include "core/model/hashing.h"
#include "core/placements/device_collective.h"
#include "core/placements/device_peer.h"
#include "core/placements/host_head_sharded.h"
#include "core/placements/shared_host_copy.h"
#include "core/placements/sglang_private.h"
#include "core/placements/host_private.h"
#include "core/placements/host_shared.h"
#include "core/base/splitmix64.h"
#include "core/model/table_fill.h"

namespace engram {
namespace {

// A group of one: every collective is a copy of this rank's own data.
class SoloCollectives final : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int world_rank() const override { return 0; }
  Status all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    ENGRAM_CHECK(all.size() == mine.size());
    std::memcpy(all.data(), mine.data(), mine.size());
    return Status::ok();
  }
  Status reduce_scatter_sum_bf16(std::span<const uint16_t> input, std::span<uint16_t> output) override {
    ENGRAM_CHECK(input.size() == output.size());
    std::memcpy(output.data(), input.data(), input.size_bytes());
    return Status::ok();
  }
  Status all_to_all(std::span<const std::byte> send, std::span<std::byte> receive) override {
    ENGRAM_CHECK(send.size() == receive.size());
    std::memcpy(receive.data(), send.data(), send.size());
    return Status::ok();
  }
  Status barrier() override { return Status::ok(); }
  Result<std::unique_ptr<Collectives>> split(int, int) override { return std::unique_ptr<Collectives>(new SoloCollectives); }
};

// V4.1 structure (3 orders x 8 heads, 256-dim FP8 rows) with a 40k vocabulary:
// 24 primes near 40,000, about 0.96 M rows, about 253 MB.
struct BenchTable {
  ModelSpec model;
  std::vector<std::byte> bytes;
  std::vector<int64_t> ids;  // 65536 tokens x 24 heads
};

const BenchTable& bench_table() {
  static const BenchTable table = [] {
    BenchTable t;
    auto model = make_model_spec("bench-v4.1-rows", 40'000, {1}, {2, 3, 4}, 8, RowFormat::kFp8E4M3Ue8m0, 256, 0xbe7c);
    ENGRAM_CHECK(model.is_ok());
    t.model = *model;
    const TableSpec& spec = t.model.tables[0];
    t.bytes.resize(spec.table_bytes());
    fill_table_rows(spec, 1, 0, t.bytes);
    std::vector<int64_t> tokens(65536);
    uint64_t state = 7;
    for (int64_t& token : tokens) token = static_cast<int64_t>(splitmix64_next(state) % 40'000);
    auto hasher = TableHasher::create(t.model, 0);
    ENGRAM_CHECK(hasher.is_ok());
    t.ids.resize(tokens.size() * 24);
    ENGRAM_CHECK(hasher->hash(tokens, {}, t.ids).is_ok());
    return t;
  }();
  return table;
}

// The host placements: the device placements look up on the device (their
// emulated form is the emulator's, not a CPU benchmark's).
void BM_Lookup(benchmark::State& state, Placement placement) {
  const BenchTable& table = bench_table();
  const TableSpec& spec = table.model.tables[0];
  const int64_t tokens = state.range(0);
  std::vector<uint16_t> out(static_cast<size_t>(tokens) * 24 * 256);
  LookupRequest request{&spec, std::span(table.ids).first(static_cast<size_t>(tokens) * 24), tokens, out};
  SoloCollectives solo;
  const std::span<const std::byte> whole(table.bytes);
  for (auto _ : state) {
    const PlacementOps& ops = placement_ops(placement);
    const Status s = ops.lookup_from_whole_table == nullptr
                         ? failed_precondition(std::string(ops.name) + " looks up on a device, not in a CPU benchmark")
                         : ops.lookup_from_whole_table(solo, solo, request, whole);
    if (!s.is_ok()) {
      state.SkipWithError(s.to_string().c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double rows = static_cast<double>(tokens) * 24;
  state.counters["rows/s"] = benchmark::Counter(rows, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["read_GB/s"] =
      benchmark::Counter(rows * 264 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["written_GB/s"] =
      benchmark::Counter(rows * 512 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["table_MB"] = static_cast<double>(spec.table_bytes()) / 1e6;
}

// Sequential read of a buffer larger than any cache: the ceiling for reads.
void BM_MemoryRead(benchmark::State& state) {
  std::vector<uint64_t> buffer(static_cast<size_t>(256) << 20 >> 3, 1);
  for (auto _ : state) {
    uint64_t sum = std::accumulate(buffer.begin(), buffer.end(), uint64_t{0});
    benchmark::DoNotOptimize(sum);
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(buffer.size() * 8) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// memcpy of 256 MB: read plus write, counted as bytes copied.
void BM_MemoryCopy(benchmark::State& state) {
  std::vector<std::byte> from(static_cast<size_t>(256) << 20, std::byte{1}), to(from.size());
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), from.size());
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  }
  state.counters["copied_GB/s"] = benchmark::Counter(static_cast<double>(from.size()) / 1e9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

void token_counts(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {1, 64, 1024, 65536}) b->Arg(tokens);
  b->ArgName("tokens")->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_MemoryRead)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MemoryCopy)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Lookup, host_shared, Placement::kHostShared)->Apply(token_counts);
BENCHMARK_CAPTURE(BM_Lookup, host_head_sharded, Placement::kHostHeadSharded)->Apply(token_counts);
BENCHMARK_CAPTURE(BM_Lookup, host_private, Placement::kHostPrivate)->Apply(token_counts);

}  // namespace
}  // namespace engram

BENCHMARK_MAIN();
