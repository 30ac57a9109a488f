// CudaDeviceCompute on real GPUs: the same calls the emulator's tests make
// (tests/sim_device_compute_test.cc), checked against the CPU rules. The
// device fill writes the CPU fill's bytes; a registered host table is read
// by the kernel at small sizes and through the host row stager at large
// ones, eager and in graph replay, each equal to the CPU rule with a head
// window; the collective over row ranges through NCCL (two GPUs, one thread
// each, bootstrapped over in-process collectives) equals the direct lookup.
#include "backends/cuda/cuda_device_compute.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include "core/lookup/device_lookup.h"
#include "core/lookup/shard_layout.h"
#include "core/model/table_fill.h"
#include "kernels/gather_reference.h"
#include "tests/gpu/gpu_test_support.h"

namespace engram {
namespace {

using gpu_test::ThreadCollectives;
using gpu_test::ThreadCollectivesHub;

TableSpec table_of(RowFormat format, int dim, int64_t rows_per_head) {
  auto spec = make_model_spec("device-compute-gpu", rows_per_head, {1}, {2, 3}, 4, format, dim, 3);
  EXPECT_TRUE(spec.is_ok());
  return spec->tables[0];
}

std::vector<int64_t> random_ids(const TableSpec& t, int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(tokens * t.head_count()));
  for (auto& id : ids) {
    const uint64_t draw = rng() % 32;
    id = draw == 0 ? kDeadId : draw == 1 ? t.row_count() + 5 : static_cast<int64_t>(rng() % static_cast<uint64_t>(t.row_count()));
  }
  return ids;
}

// The CPU rule for a head window over rows [first, first + count).
std::vector<uint16_t> expected_window(const TableSpec& t, std::span<const std::byte> whole, std::span<const int64_t> ids,
                                      int head_begin, int head_count, int64_t first, int64_t count) {
  const int64_t tokens = static_cast<int64_t>(ids.size()) / t.head_count();
  std::vector<uint16_t> out(static_cast<size_t>(tokens * head_count * t.dim), 0);
  for (int64_t k = 0; k < tokens; ++k)
    for (int h = 0; h < head_count; ++h) {
      const int64_t id = ids[static_cast<size_t>(k * t.head_count() + head_begin + h)];
      if (id < first || id >= first + count) continue;
      kernels::row_reference(t, whole.subspan(static_cast<size_t>(id) * t.row_bytes(), t.row_bytes()),
                             std::span(out).subspan(static_cast<size_t>((k * head_count + h) * t.dim), t.dim));
    }
  return out;
}

TEST(CudaDeviceCompute, DeviceFillWritesTheCpuFillsBytes) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  for (auto [format, dim] : {std::pair{RowFormat::kFp8E4M3Ue8m0, 256}, std::pair{RowFormat::kBf16, 96}}) {
    const TableSpec t = table_of(format, dim, 5000);
    std::vector<std::byte> cpu(t.table_bytes());
    fill_table_rows(t, 41, 0, cpu);
    cuda::CudaDeviceCompute c(0);
    auto rows = c.allocate(t.table_bytes());
    ENGRAM_STATUS_OK(rows.status());
    ENGRAM_STATUS_OK(c.fill_table_rows(*rows, t, 41, 0, t.row_count(), {}));
    ENGRAM_STATUS_OK(c.synchronize({}));
    std::vector<std::byte> gpu(t.table_bytes());
    ENGRAM_STATUS_OK(c.copy_to_host(gpu, *rows));
    EXPECT_TRUE(gpu == cpu) << "format " << static_cast<int>(format);
    ENGRAM_STATUS_OK(c.free(*rows));
  }
}

// cudaMemcpy2D reads what one copy per row reads (the host lookup's header
// check: each member's header words at the member's pitch), and a bad shape
// is the same invalid_argument the emulator gives.
TEST(CudaDeviceCompute, StridedCopyReadsEveryRowAndRefusesBadShapes) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  cuda::CudaDeviceCompute c(0);
  constexpr uint64_t kPitch = 1544, kRow = 16, kRows = 37;
  std::vector<std::byte> bytes(kPitch * kRows);
  for (uint64_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7 % 251);
  auto src = c.allocate(bytes.size());
  ENGRAM_STATUS_OK(src.status());
  ENGRAM_STATUS_OK(c.copy_to_device(*src, bytes));
  std::vector<std::byte> got(kRows * kRow), want(kRows * kRow);
  ENGRAM_STATUS_OK(c.copy_to_host_strided(got, *src + 8, kRow, kPitch));
  for (uint64_t k = 0; k < kRows; ++k)
    ENGRAM_STATUS_OK(c.copy_to_host(std::span(want).subspan(k * kRow, kRow), *src + 8 + k * kPitch));
  EXPECT_TRUE(got == want);
  std::vector<std::byte> out(4 * kRow);
  for (auto [row_bytes, pitch] : {std::pair{uint64_t{0}, kPitch}, std::pair{uint64_t{24}, kPitch}, std::pair{kRow, uint64_t{8}}}) {
    const Status bad = c.copy_to_host_strided(out, *src, row_bytes, pitch);
    EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument) << bad.to_string();
  }
  ENGRAM_STATUS_OK(c.free(*src));
}

TEST(CudaDeviceCompute, RegisteredHostTableEqualsTheCpuRuleThroughTheKernelAndTheStagerEagerAndInGraphs) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  const TableSpec t = table_of(RowFormat::kFp8E4M3Ue8m0, 256, 20000);
  const size_t bytes = (t.table_bytes() + 4095) / 4096 * 4096;
  auto* host = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
  ASSERT_NE(host, nullptr);
  fill_table_rows(t, 9, 0, std::span(host, t.table_bytes()));
  const std::span<const std::byte> whole(host, t.table_bytes());
  cuda::CudaComputeOptions options;
  options.staged_rows_min = 4096;  // the stager from 4,096 rows up, so both paths run here
  options.stager_threads = 4;
  cuda::CudaDeviceCompute c(0, options);
  const int64_t tokens_max = 1024;
  ENGRAM_STATUS_OK(c.prepare_lookups(tokens_max * t.head_count(), t.row_bytes(), true));
  auto base = c.register_host(std::span<const std::byte>(host, bytes));
  ENGRAM_STATUS_OK(base.status());
  auto ids_d = c.allocate(tokens_max * t.head_count() * 8);
  auto out_d = c.allocate(tokens_max * t.head_count() * t.dim * 2);
  ENGRAM_STATUS_OK(ids_d.status());
  ENGRAM_STATUS_OK(out_d.status());
  cudaStream_t stream;
  ENGRAM_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const StreamRef s{reinterpret_cast<uintptr_t>(stream)};
  struct Case {
    int64_t tokens;
    int head_begin, head_count;
    int64_t first, count;  // the rows this "rank" holds
  };
  const int heads = t.head_count();
  const Case cases[] = {
      {1, 0, heads, 0, t.row_count()},                 // kernel
      {64, 0, heads, 0, t.row_count()},                // kernel
      {1024, 0, heads, 0, t.row_count()},              // stager
      {700, 2, 3, t.head_offset(2), t.head_offset(5) - t.head_offset(2)},  // stager, a TP slice
      {33, 4, 4, t.head_offset(4), t.row_count() - t.head_offset(4)},      // kernel, a TP slice
  };
  for (const Case& k : cases) {
    for (bool graph : {false, true}) {
      DeviceGather g;
      g.ids = *ids_d;
      g.tokens = k.tokens;
      g.ids_per_token = heads;
      g.head_begin = k.head_begin;
      g.head_count = k.head_count;
      g.range_first_row = k.first;
      g.range_row_count = k.count;
      g.range_base = *base + static_cast<uint64_t>(k.first) * t.row_bytes();
      g.host_rows = host + static_cast<uint64_t>(k.first) * t.row_bytes();
      g.layout = device_row_layout(t);
      g.out = *out_d;
      cudaGraphExec_t exec = nullptr;
      if (graph) {
        cudaGraph_t captured;
        ENGRAM_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        ENGRAM_STATUS_OK(c.gather(g, s));
        ENGRAM_CUDA_OK(cudaStreamEndCapture(stream, &captured));
        ENGRAM_CUDA_OK(cudaGraphInstantiate(&exec, captured, 0));
        ENGRAM_CUDA_OK(cudaGraphDestroy(captured));
      }
      // Three replays, fresh ids each: the graph reads the ids buffer anew.
      for (uint64_t round = 0; round < 3; ++round) {
        const auto ids = random_ids(t, k.tokens, k.tokens * 7 + round + (graph ? 100 : 0));
        ENGRAM_STATUS_OK(c.copy_to_device(*ids_d, std::as_bytes(std::span(ids))));
        ENGRAM_STATUS_OK(c.fill_async(*out_d, 0x5a, k.tokens * k.head_count * t.dim * 2, s));  // poison
        if (graph) ENGRAM_CUDA_OK(cudaGraphLaunch(exec, stream));
        else ENGRAM_STATUS_OK(c.gather(g, s));
        ENGRAM_STATUS_OK(c.synchronize(s));
        std::vector<uint16_t> got(static_cast<size_t>(k.tokens * k.head_count * t.dim));
        ENGRAM_STATUS_OK(c.copy_to_host(std::as_writable_bytes(std::span(got)), *out_d));
        EXPECT_TRUE(got == expected_window(t, whole, ids, k.head_begin, k.head_count, k.first, k.count))
            << k.tokens << " tokens, heads [" << k.head_begin << ", " << k.head_begin + k.head_count << ")"
            << (graph ? ", graph replay " : ", eager ") << round;
      }
      if (exec) ENGRAM_CUDA_OK(cudaGraphExecDestroy(exec));
    }
  }
  ENGRAM_CUDA_OK(cudaStreamDestroy(stream));
  ENGRAM_STATUS_OK(c.free(*ids_d));
  ENGRAM_STATUS_OK(c.free(*out_d));
  ENGRAM_STATUS_OK(c.unregister_host(std::span<const std::byte>(host, bytes)));
  std::free(host);
}

// Both -0 rules: a sum over NCCL writes -0 as +0 (engramlab, SGLang's
// all-reduce); a table that keeps -0 on every path (vLLM) is combined by
// NCCL's byte-wise max, and its -0 values come back 0x8000.
TEST(CudaDeviceCompute, CollectiveOverRowRangesThroughNcclEqualsTheDirectLookup) {
  ENGRAM_SKIP_WITHOUT_GPUS(2);
  const TableSpec t = table_of(RowFormat::kFp8E4M3Ue8m0, 256, 30011);
  std::vector<std::byte> whole(t.table_bytes());
  fill_table_rows(t, 17, 0, whole);
  const int ranks = 2;
  const int64_t slot = 300;
  ThreadCollectivesHub hub(ranks);
  std::vector<std::string> failures(ranks);
  auto rank_main = [&](int me) {
    auto fail = [&](const std::string& what) { failures[static_cast<size_t>(me)] += what + "; "; };
    auto ok = [&](const Status& st, const char* what) {
      if (!st.is_ok()) fail(std::string(what) + ": " + st.to_string());
      return st.is_ok();
    };
    cuda::CudaDeviceCompute c(me);
    ThreadCollectives bootstrap(hub, me);
    auto group = c.connect(bootstrap);
    if (!ok(group.status(), "connect")) return;
    const RowShardLayout layout(t.row_count(), ranks);
    auto shard = c.allocate(layout.shard_rows(me) * t.row_bytes());
    if (!ok(shard.status(), "allocate")) return;
    if (!ok(c.fill_table_rows(*shard, t, 17, layout.shard_begin(me), layout.shard_rows(me), {}), "fill")) return;
    ModelSpec model;
    model.tables = {t};
    auto w = make_collective_workspace(c, slot, model, ranks, me);
    if (!ok(w.status(), "workspace")) return;
    auto ids_d = c.allocate(slot * t.head_count() * 8);
    auto out_d = c.allocate(slot * t.head_count() * t.dim * 2);
    cudaSetDevice(me);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    DeviceLookupRequest r;
    r.table = &t;
    r.row_ids = *ids_d;
    r.tokens_per_rank_max = slot;
    r.output = *out_d;
    r.stream = StreamRef{reinterpret_cast<uintptr_t>(stream)};
    const OwnedRows owned{layout.shard_begin(me), layout.shard_rows(me), *shard, nullptr};
    for (MinusZeroRule rule : {MinusZeroRule::kWritePlusZero, MinusZeroRule::kKeep}) {
      TableSpec ruled = t;
      ruled.minus_zero = rule;
      r.table = &ruled;
      int64_t minus_zeros = 0;
      for (int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{177}, slot}) {
        r.tokens = me == 0 ? tokens : slot - tokens;  // uneven on purpose
        const auto ids = random_ids(t, r.tokens, 1000 + tokens * 2 + me);
        if (!ids.empty()) ok(c.copy_to_device(*ids_d, std::as_bytes(std::span(ids))), "ids");
        if (!ok(lookup_collective_on_device(c, **group, *w, owned, 0, r, me, GroupHeaders::kNone), "lookup")) return;
        if (!ok(c.synchronize(r.stream), "sync")) return;
        std::vector<uint16_t> got(ids.size() * t.dim);
        if (!got.empty()) ok(c.copy_to_host(std::as_writable_bytes(std::span(got)), *out_d), "out");
        if (got != expected_window(ruled, whole, ids, 0, t.head_count(), 0, t.row_count()))
          fail("rank " + std::to_string(me) + ", -0 " + std::string(minus_zero_rule_name(rule)) + ": " +
               std::to_string(r.tokens) + " tokens differ from the direct lookup");
        minus_zeros += std::count(got.begin(), got.end(), uint16_t{0x8000});
      }
      if ((minus_zeros > 0) != (rule == MinusZeroRule::kKeep))
        fail("rank " + std::to_string(me) + ": " + std::to_string(minus_zeros) + " values 0x8000 under -0 rule " +
             std::string(minus_zero_rule_name(rule)));
    }
    cudaStreamDestroy(stream);
    ok(free_collective_workspace(c, *w), "free workspace");
    for (DevicePtr p : {*shard, *ids_d, *out_d}) ok(c.free(p), "free");
  };
  std::thread other(rank_main, 1);
  rank_main(0);
  other.join();
  for (const std::string& f : failures) EXPECT_TRUE(f.empty()) << f;
}

}  // namespace
}  // namespace engram
