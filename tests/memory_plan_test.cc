#include "core/plan/memory_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/model/gpu_models.h"
#include "core/placements/device_collective.h"
#include "core/placements/device_row_shards.h"
#include "core/placements/host_head_sharded.h"
#include "core/model/table_spec.h"
#include "core/base/units.h"
#include "tests/deployment_fixtures.h"

namespace engram {
namespace {

const ModelSpec& flash() {
  static const ModelSpec spec = model_preset("deepseek-v4.1-flash").value();
  return spec;
}

TEST(MemoryPlan, FlashTableBytesMatchTheDesign) {
  ASSERT_EQ(flash().tables.size(), 2u);
  EXPECT_EQ(flash().tables[0].table_bytes(), 101'377'628'352ull);
  EXPECT_EQ(flash().tables[1].table_bytes(), 101'380'404'048ull);
  EXPECT_EQ(flash().table_bytes_total(), testing::kFlashTableBytesTotal);
}

TEST(MemoryPlan, DeviceShardBytesAreRoundedPerTable) {
  // ceil(rows / shards) * 264, each table rounded up to 2 MiB.
  EXPECT_EQ(device_shard_hbm_bytes(flash(), 1, kVmmGranularityBytes), 202'758'946'816ull);
  EXPECT_EQ(device_shard_hbm_bytes(flash(), 2, kVmmGranularityBytes), 101'380'521'984ull);
  EXPECT_EQ(device_shard_hbm_bytes(flash(), 4, kVmmGranularityBytes), 50'692'358'144ull);
  EXPECT_EQ(device_shard_hbm_bytes(flash(), 8, kVmmGranularityBytes), 25'346'179'072ull);
  EXPECT_EQ(device_shard_hbm_bytes(flash(), 8, kVmmGranularityBytes) % kVmmGranularityBytes, 0u);
}

TEST(MemoryPlan, CollectiveBufferIsGroupTimesTokensTimesRow) {
  // 8 x 1024 tokens x 24 heads x 256 dims x 2 B.
  EXPECT_EQ(collective_buffer_bytes(flash(), 8, 1024), 100'663'296ull);
  EXPECT_EQ(collective_buffer_bytes(flash(), 16, 1024), 2 * 100'663'296ull);
}

TEST(MemoryPlan, HeadShardsOfAGroupSumToTheTables) {
  for (int g : {1, 2, 3, 4, 5, 7, 8, 24, 25}) {
    uint64_t sum = 0;
    for (int i = 0; i < g; ++i) sum += head_shard_host_bytes(flash(), g, i);
    EXPECT_EQ(sum, testing::kFlashTableBytesTotal) << g;
  }
  // Member 0 of 4 holds heads 0-5 of each table.
  uint64_t expect = 0;
  for (const TableSpec& t : flash().tables)
    for (int h = 0; h < 6; ++h) expect += static_cast<uint64_t>(t.primes[h]) * 264;
  EXPECT_EQ(head_shard_host_bytes(flash(), 4, 0), expect);
}

TEST(MemoryPlan, PerRankAndPerHostForEachPlacement) {
  std::vector<HostSpec> hosts = {testing::host("a", 8), testing::host("b", 8)};
  for (HostSpec& h : hosts) h.gpu_memory_bytes = default_gpu_memory_bytes("H200").value();
  const uint64_t total = testing::kFlashTableBytesTotal;
  // Host a: 4 ranks host_shared + 4 ranks host_private. Host b: two head-sharded groups of 2,
  // and 2 device_peer ranks of a shard group of 8 and 2 device_collective ranks of a group of 8.
  std::vector<RankMemoryInput> in;
  for (int i = 0; i < 4; ++i) in.push_back({0, Placement::kHostShared, 1, 0, 4, i});
  for (int i = 0; i < 4; ++i) in.push_back({0, Placement::kHostPrivate, 1, 1 + i, 1, 0});
  for (int i = 0; i < 4; ++i) in.push_back({1, Placement::kHostHeadSharded, 1, 5 + i / 2, 2, i % 2});
  for (int i = 0; i < 2; ++i) in.push_back({1, Placement::kDevicePeer, 8, -1, 1, 0});
  for (int i = 0; i < 2; ++i) in.push_back({1, Placement::kDeviceCollective, 8, -1, 1, 0});
  MemoryPlan plan = plan_memory(flash(), hosts, in, 1024);
  ASSERT_EQ(plan.hosts.size(), 2u);
  const uint64_t h200 = 143'155 * kMiB;  // CUDA's total for an H200
  // KV cache left: 0.90 of the GPU (the engine's default fraction) less what Engram takes.
  auto kv = [&](uint64_t engram) { return static_cast<int64_t>(static_cast<double>(h200) * 0.9) - static_cast<int64_t>(engram); };
  EXPECT_EQ(plan.ranks[0].host_shared_mapped_bytes, total);
  EXPECT_EQ(plan.ranks[0].host_private_bytes, 0u);
  EXPECT_EQ(plan.ranks[4].host_private_bytes, total);
  EXPECT_EQ(plan.ranks[8].host_private_bytes + plan.ranks[9].host_private_bytes, total);
  EXPECT_EQ(plan.ranks[12].hbm_table_bytes, 25'346'179'072ull);
  EXPECT_EQ(plan.ranks[12].hbm_buffer_bytes, 0u);
  EXPECT_EQ(plan.ranks[12].kv_cache_left_bytes, kv(25'346'179'072ull));
  EXPECT_EQ(plan.ranks[14].hbm_buffer_bytes, 100'663'296ull);
  EXPECT_EQ(plan.ranks[14].kv_cache_left_bytes, kv(25'346'179'072ull + 100'663'296ull));
  EXPECT_EQ(plan.ranks[0].kv_cache_left_bytes, kv(0));
  EXPECT_EQ(plan.ranks[0].kv_budget_bytes, static_cast<uint64_t>(kv(0)));

  const HostMemory& a = plan.hosts[0];
  EXPECT_EQ(a.rank_count, 8);
  EXPECT_EQ(a.shm_bytes, total);
  EXPECT_EQ(a.table_copies, 5);  // one shared + four private
  EXPECT_EQ(a.host_table_bytes, 5 * total);
  const HostMemory& b = plan.hosts[1];
  EXPECT_EQ(b.shm_bytes, 0u);
  EXPECT_EQ(b.table_copies, 2);  // two head-sharded groups
  EXPECT_EQ(b.host_table_bytes, 2 * total);
  EXPECT_EQ(b.hbm_bytes_per_gpu_max, 25'346'179'072ull + 100'663'296ull);
  EXPECT_EQ(b.kv_cache_left_bytes_min, kv(25'346'179'072ull + 100'663'296ull));
}

TEST(MemoryPlan, TablesLargerThanTheGpuLeaveNegativeKv) {
  std::vector<HostSpec> hosts = {testing::host("a", 1, "H100")};
  hosts[0].gpu_memory_bytes = 80 * kGiB;
  std::vector<RankMemoryInput> in = {{0, Placement::kDevicePeer, 1, -1, 1, 0}};
  EngineMemory engine;
  engine.gpu_memory_fraction = 1.0;
  MemoryPlan plan = plan_memory(flash(), hosts, in, 1024, engine);
  EXPECT_LT(plan.ranks[0].kv_cache_left_bytes, 0);
  EXPECT_EQ(plan.ranks[0].kv_cache_left_bytes,
            static_cast<int64_t>(80 * kGiB) - static_cast<int64_t>(202'758'946'816ull));
}

TEST(MemoryPlan, KvCacheLeftCountsTheEngineFractionAndReserve) {
  EngineMemory engine;
  engine.gpu_memory_fraction = 0.5;
  engine.gpu_reserved_bytes = 10 * kGiB;
  // 100 GiB x 0.5 - 20 GiB of Engram - 10 GiB reserved = 20 GiB.
  EXPECT_EQ(kv_cache_left_bytes(100 * kGiB, engine, 20 * kGiB), static_cast<int64_t>(20 * kGiB));
  engine.gpu_reserved_bytes = 40 * kGiB;
  EXPECT_EQ(kv_cache_left_bytes(100 * kGiB, engine, 20 * kGiB), -static_cast<int64_t>(10 * kGiB));
  EXPECT_EQ(kv_cache_left_bytes(100 * kGiB, EngineMemory{}, 0), static_cast<int64_t>(90 * kGiB));
}

TEST(GpuModels, DefaultsAreCudaTotalsAndNamesIgnoreCase) {
  EXPECT_EQ(default_gpu_memory_bytes("H100").value(), 81'050 * kMiB);   // 79.15 GiB
  EXPECT_EQ(default_gpu_memory_bytes("H200").value(), 143'155 * kMiB);  // 139.80 GiB
  EXPECT_EQ(default_gpu_memory_bytes("B200").value(), 182'630 * kMiB);  // 178.35 GiB
  EXPECT_EQ(default_gpu_memory_bytes("GB200").value(), 188'733 * kMiB); // 184.31 GiB
  // B300 and GB300 carry the same 288 GB and report the same total.
  EXPECT_EQ(default_gpu_memory_bytes("B300").value(), default_gpu_memory_bytes("GB300").value());
  EXPECT_EQ(format_gib(default_gpu_memory_bytes("H200").value()), "139.800 GiB");
  for (const char* spelled : {"gb200", "Gb200", "GB200"}) {
    auto m = find_gpu_model(spelled);
    ASSERT_TRUE(m.is_ok()) << spelled;
    EXPECT_EQ(m->name, "GB200");
    EXPECT_NE(std::string(m->memory_source).find("184.31 GiB"), std::string::npos);
  }
  auto unknown = find_gpu_model("A100");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("'A100'"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("H100, H200, B200, GB200, B300, GB300"), std::string::npos);
}

}  // namespace
}  // namespace engram
