// The device_peer table on the emulator: shards filled from a filler, every
// row read through its owner's peer pointer equals the filler's bytes, DEAD
// and out-of-table ids give zero rows, and a failed fill leaves nothing.
#include "core/exchange/peer_shard_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "core/model/table_spec.h"
#include "core/base/units.h"
#include "sim/world.h"

namespace engram {
namespace {

constexpr uint64_t kRowBytes = 264;  // a V4.1 row: 256 FP8 values + 8 scales

std::byte row_byte(int64_t row, uint64_t i) { return std::byte(static_cast<uint8_t>(row * 31 + i * 7 + 1)); }

Status fill_rows(int64_t first_row, std::span<std::byte> rows) {
  for (size_t k = 0; k < rows.size(); ++k)
    rows[k] = row_byte(first_row + static_cast<int64_t>(k / kRowBytes), k % kRowBytes);
  return Status::ok();
}

sim::WorldSpec four_gpus_one_host() {
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("h200-", 1, 4, "H200");
  return spec;
}

// Uneven on purpose: 100,003 rows over 4 ranks, ~26 MiB per shard.
constexpr int64_t kRows = 100003;

// Row `row` as this rank's device reads it through its owner's mapping
// (DEAD and out-of-table rows: zero, as every lookup gives them).
Status read_through_owner(RankBackend& b, const PeerShardTable& table, int64_t row, std::span<std::byte> out) {
  const int owner = table.layout().owner_of(row);
  if (owner < 0) {
    std::fill(out.begin(), out.end(), std::byte{0});
    return Status::ok();
  }
  const DevicePtr at = table.shard_pointers()[static_cast<size_t>(owner)] +
                       static_cast<uint64_t>(row - table.layout().shard_begin(owner)) * kRowBytes;
  return b.device->copy_from_device(out, at);
}

Status build_and_check_every_row(RankBackend& b, int64_t rows) {
  // 1 MiB host chunks: several per shard.
  ENGRAM_ASSIGN_OR_RETURN(PeerShardTable table,
                          PeerShardTable::build(b, *b.world, rows, kRowBytes,
                                                host_staged_filler(*b.device, kRowBytes, fill_rows, 1 << 20)));
  if (table.shard_starts().size() != 5 || table.shard_starts().back() != rows)
    return internal_error("shard starts do not cover the table");
  if (table.shard_allocation_bytes() % (2 * kMiB) != 0) return internal_error("shard not rounded to granularity");
  std::vector<std::byte> got(kRowBytes);
  // Every 97th row plus each shard's first and last row: through every owner.
  std::vector<int64_t> probe_rows;
  for (int64_t r = 0; r < rows; r += 97) probe_rows.push_back(r);
  for (int s = 0; s < 4; ++s) {
    if (table.layout().shard_rows(s) == 0) continue;
    probe_rows.push_back(table.layout().shard_begin(s));
    probe_rows.push_back(table.layout().shard_end(s) - 1);
  }
  for (int64_t r : probe_rows) {
    ENGRAM_RETURN_IF_ERROR(read_through_owner(b, table, r, got));
    for (uint64_t i = 0; i < kRowBytes; ++i)
      if (got[i] != row_byte(r, i))
        return internal_error("row " + std::to_string(r) + " read through its owner differs from the filler");
  }
  for (int64_t dead : {kDeadId, rows, rows + 1000}) {
    std::fill(got.begin(), got.end(), std::byte{0xff});
    ENGRAM_RETURN_IF_ERROR(read_through_owner(b, table, dead, got));
    for (std::byte x : got)
      if (x != std::byte{0}) return internal_error("DEAD or out-of-table id did not give a zero row");
  }
  return table.teardown();
}

TEST(PeerShardTable, RoundTripThroughPeerPointersEqualsTheFiller) {
  auto run = sim::run_world(four_gpus_one_host(), [](RankBackend& b) { return build_and_check_every_row(b, kRows); });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

TEST(PeerShardTable, FewerRowsThanRanksLeavesEmptyShardsAndStillWorks) {
  auto run = sim::run_world(four_gpus_one_host(), [](RankBackend& b) { return build_and_check_every_row(b, 3); });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty());
}

TEST(PeerShardTable, FabricAcrossHostsOfOneDomain) {
  sim::WorldSpec spec;
  spec.hosts = sim::gb300_nvl72_racks(1);
  spec.hosts.resize(2);  // two trays of one rack: 8 ranks
  HandleType seen = HandleType::kPosixFd;
  auto run = sim::run_world(spec, [&](RankBackend& b) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(PeerShardTable table, PeerShardTable::build(b, *b.world, 4099, kRowBytes,
                                                                      host_staged_filler(*b.device, kRowBytes, fill_rows)));
    seen = table.handle_type();
    std::vector<std::byte> got(kRowBytes);
    const int64_t row = (b.world_rank * 613) % 4099;
    ENGRAM_RETURN_IF_ERROR(read_through_owner(b, table, row, got));
    for (uint64_t i = 0; i < kRowBytes; ++i)
      if (got[i] != row_byte(row, i)) return internal_error("fabric row differs");
    return table.teardown();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_EQ(seen, HandleType::kFabric);
  EXPECT_TRUE(run->leaks.empty());
}

TEST(PeerShardTable, AFailedFillOnOneRankFailsAllAndLeavesNothing) {
  auto run = sim::run_world(four_gpus_one_host(), [](RankBackend& b) -> Status {
    auto table = PeerShardTable::build(b, *b.world, kRows, kRowBytes,
                                       host_staged_filler(*b.device, kRowBytes, [&](int64_t first, std::span<std::byte> rows) {
                                         if (b.world_rank == 1) return resource_exhausted("checkpoint file truncated");
                                         return fill_rows(first, rows);
                                       }));
    if (table.is_ok()) return internal_error("build succeeded although rank 1 could not fill");
    return table.status();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_EQ(run->statuses[1].code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(run->statuses[1].context().step, "fill");
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(run->statuses[static_cast<size_t>(r)].code(), ErrorCode::kUnavailable);
    EXPECT_EQ(run->statuses[static_cast<size_t>(r)].context().peer, 1);
  }
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

}  // namespace
}  // namespace engram
