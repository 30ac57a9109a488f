// device_head_sharded on real GPUs: the placement built through its
// registration (CUDA VMM slices filled on the device, NCCL over the group's
// members, one thread per GPU bootstrapped over in-process collectives),
// its device lookup (the ids all-gathered, each GPU gathering its heads,
// the all-to-all, the bf16 reassembly gather) and its host lookup (which
// also serves ids of another slice's bucket) bitwise equal to the CPU rule.
// With one GPU the group is the one member that GPU holds; with two or more,
// the heads (9, not divisible by 2 or 4) are cut over every GPU. Under
// sequence parallelism the GPUs are one replica's TP ranks, each asking for
// its own token shard of the replica's tokens (sequence_parallel_shards =
// tp): its posted shard, NCCL's all-to-all and the shard's reassembly.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "backends/cuda/cuda_device_compute.h"
#include "backends/cuda/cuda_device_memory.h"
#include "core/placements/device_head_sharded.h"
#include "kernels/gather_reference.h"
#include "tests/gpu/gpu_test_support.h"

namespace engram {
namespace {

using gpu_test::ThreadCollectives;
using gpu_test::ThreadCollectivesHub;

// Ids of `tokens` tokens: in each head's bucket (what hashing gives), with
// DEAD and past-the-table ids; `any_row` also draws ids of other buckets.
std::vector<int64_t> draw_ids(const TableSpec& t, int64_t tokens, uint64_t seed, bool any_row) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(tokens * t.head_count()));
  for (size_t i = 0; i < ids.size(); ++i) {
    const int h = static_cast<int>(i % static_cast<size_t>(t.head_count()));
    const uint64_t draw = rng() % 16;
    const int64_t bucket = t.primes[static_cast<size_t>(h)];
    ids[i] = draw == 0   ? kDeadId
             : draw == 1 ? t.row_count() + 3
             : draw == 2 && any_row ? static_cast<int64_t>(rng() % static_cast<uint64_t>(t.row_count()))
                                    : t.head_offset(h) + static_cast<int64_t>(rng() % static_cast<uint64_t>(bucket));
  }
  return ids;
}

// `sequence_parallel`: the members, one replica's TP ranks, look up the
// same ids, each its token shard; else each member its own ids, every token.
void run_group(int members, bool sequence_parallel) {
  auto spec = make_model_spec("head-sharded-gpu", 3001, {1, 14}, {2, 3, 4}, 3, RowFormat::kFp8E4M3Ue8m0, 256, 5);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  const ModelSpec model = *spec;
  const int64_t slot = 300;
  const uint64_t fill_seed = 17;
  ThreadCollectivesHub hub(members);
  std::vector<std::string> failures(static_cast<size_t>(members));
  auto rank_main = [&](int me) {
    auto fail = [&](const std::string& what) { failures[static_cast<size_t>(me)] += what + "; "; };
    auto ok = [&](const Status& st, const std::string& what) {
      if (!st.is_ok()) fail(what + ": " + st.to_string());
      return st.is_ok();
    };
    auto memory = cuda::CudaDeviceMemory::open(me);
    if (!ok(memory.status(), "open")) return;
    cuda::CudaDeviceCompute c(me);
    ThreadCollectives bootstrap(hub, me);
    RankBackend backend{.world_rank = me, .world_size = members, .world = &bootstrap, .device = memory->get(),
                        .compute = &c};
    // Every member a TP rank of the group (the bootstrap cannot split): its
    // token shard is asked for only under sequence parallelism.
    PlacementContext context{.backend = backend, .group = bootstrap, .tp_group = bootstrap,
                             .host_group = bootstrap, .host_writer_world_rank = 0, .model = model,
                             .fill_seed = fill_seed, .job_id = "gpu-test"};
    context.tokens_per_rank_max = slot;
    auto tables = placement_ops(Placement::kDeviceHeadSharded).build(context);
    if (!ok(tables.status(), "build")) return;
    auto ids_d = c.allocate(slot * model.tables[0].head_count() * 8);
    auto out_d = c.allocate(slot * model.tables[0].head_count() * 256 * 2);
    if (!ok(ids_d.status(), "allocate") || !ok(out_d.status(), "allocate")) return;
    cudaSetDevice(me);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    for (size_t ti = 0; ti < model.tables.size(); ++ti) {
      const TableSpec& t = model.tables[ti];
      for (int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{177}, slot}) {
        // Uneven on purpose; one replica's ids on every TP rank under sequence parallelism.
        const int64_t mine = me % 2 == 0 || sequence_parallel ? tokens : slot - tokens;
        const uint64_t who = sequence_parallel ? 0 : static_cast<uint64_t>(me);
        const std::string what = fmt::format("GPU {} of {}{}, layer {}, {} tokens", me, members,
                                             sequence_parallel ? " (its token shard)" : "", t.layer_id, mine);
        // What this rank gets back: every token, or its token shard zero-padded.
        const int shards = sequence_parallel ? members : 1;
        const int64_t shard = (mine + shards - 1) / shards;
        const size_t first = sequence_parallel ? static_cast<size_t>(me * shard) : 0;
        const size_t token_values = static_cast<size_t>(t.head_count() * t.dim);
        auto expected = [&](const std::vector<int64_t>& ids) {
          std::vector<uint16_t> every(ids.size() * static_cast<size_t>(t.dim));
          kernels::filled_lookup_reference(t, fill_seed, ids, every);
          std::vector<uint16_t> out(static_cast<size_t>(shard) * token_values, 0);
          for (size_t k = 0; k < static_cast<size_t>(shard) && first + k < static_cast<size_t>(mine); ++k)
            std::copy_n(every.begin() + static_cast<std::ptrdiff_t>((first + k) * token_values), token_values,
                        out.begin() + static_cast<std::ptrdiff_t>(k * token_values));
          return out;
        };
        // The device lookup: ids of their own buckets.
        const auto ids = draw_ids(t, mine, 1000 + static_cast<uint64_t>(tokens * 8) + who + ti, false);
        const std::vector<uint16_t> want = expected(ids);
        if (!ids.empty()) ok(c.copy_to_device(*ids_d, std::as_bytes(std::span(ids))), "ids");
        DeviceLookupRequest r;
        r.table = &t;
        r.row_ids = *ids_d;
        r.tokens = mine;
        r.tokens_per_rank_max = slot;
        r.output = *out_d;
        r.stream = StreamRef{reinterpret_cast<uintptr_t>(stream)};
        r.sequence_parallel_shards = shards;
        if (!ok((*tables)->lookup_device(static_cast<int>(ti), r), "device lookup, " + what)) return;
        if (!ok(c.synchronize(r.stream), "sync")) return;
        std::vector<uint16_t> got(want.size());
        if (!got.empty()) ok(c.copy_to_host(std::as_writable_bytes(std::span(got)), *out_d), "out");
        if (got != want) fail("device lookup differs from the CPU rule: " + what);
        // The host lookup: any row, other buckets too.
        const auto any = draw_ids(t, mine, 2000 + static_cast<uint64_t>(tokens * 8) + who + ti, true);
        const std::vector<uint16_t> want_any = expected(any);
        std::vector<uint16_t> got_any(want_any.size(), 0x5a5a);
        LookupRequest host{&t, any, slot, got_any};
        host.sequence_parallel_shards = shards;
        if (!ok((*tables)->lookup(static_cast<int>(ti), host), "host lookup, " + what)) return;
        if (got_any != want_any) fail("host lookup differs from the CPU rule: " + what);
      }
    }
    cudaStreamDestroy(stream);
    for (DevicePtr p : {*ids_d, *out_d}) ok(c.free(p), "free");
    ok((*tables)->release(), "release");
  };
  std::vector<std::thread> others;
  for (int r = 1; r < members; ++r) others.emplace_back(rank_main, r);
  rank_main(0);
  for (std::thread& t : others) t.join();
  for (const std::string& f : failures) EXPECT_TRUE(f.empty()) << f;
}

TEST(DeviceHeadShardedGpu, OneGpuGroupEqualsTheCpuRule) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  run_group(1, false);
}

TEST(DeviceHeadShardedGpu, EveryGpuCutsTheHeadsAndEqualsTheCpuRule) {
  ENGRAM_SKIP_WITHOUT_GPUS(2);
  int count = 0;
  cudaGetDeviceCount(&count);
  run_group(std::min(count, 4), false);
}

// Sequence parallelism needs TP above 1, so two GPUs at least (NCCL puts one
// member of a communicator on a GPU).
TEST(DeviceHeadShardedGpu, SequenceParallelGivesEachTpRankItsTokenShard) {
  ENGRAM_SKIP_WITHOUT_GPUS(2);
  int count = 0;
  cudaGetDeviceCount(&count);
  run_group(std::min(count, 4), true);
}

}  // namespace
}  // namespace engram
