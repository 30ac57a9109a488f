// Every placement returns the same bytes for the same ids (docs/design.md
// section 4), against the direct whole-table lookup, over emulated groups.
#include <gtest/gtest.h>

#include "core/model/hashing.h"
#include "core/base/splitmix64.h"
#include "kernels/gather_reference.h"
#include "tests/lookup_test_support.h"

namespace engram {
namespace {

using testing::first_difference;

// Hashed ids of random tokens (DEAD sprinkled in), then a few hand-placed
// odd ids: DEAD, -5, past the table, an id of another head's bucket.
std::vector<std::vector<int64_t>> ids_for_ranks(const ModelSpec& model, int table_index,
                                                const std::vector<int>& token_counts, uint64_t seed) {
  auto hasher = TableHasher::create(model, table_index);
  EXPECT_TRUE(hasher.is_ok());
  const TableSpec& table = model.tables[static_cast<size_t>(table_index)];
  const size_t heads = static_cast<size_t>(table.head_count());
  uint64_t state = seed;
  std::vector<std::vector<int64_t>> by_rank;
  for (int count : token_counts) {
    std::vector<int64_t> tokens(static_cast<size_t>(count));
    for (int64_t& t : tokens) {
      const uint64_t draw = splitmix64_next(state);
      t = draw % 5 == 0 ? kDeadId : static_cast<int64_t>(draw % static_cast<uint64_t>(model.compressed_vocab_size));
    }
    std::vector<int64_t> ids(tokens.size() * heads);
    EXPECT_TRUE(hasher->hash(tokens, {}, ids).is_ok());
    if (count >= 2) {
      ids[2] = kDeadId;  // the engines' hash gives DEAD tokens real rows; a DEAD id still reads none
      ids[1] = -5;
      ids[heads] = table.row_count();
      ids[heads + 1] = table.head_offset(table.head_count() - 1);  // the last head's first row, at head 1
      ids[0] = table.row_count() - 1;                              // the very last row, at head 0
    }
    by_rank.push_back(std::move(ids));
  }
  return by_rank;
}

void expect_all_placements_equal_direct(const ModelSpec& model, int table_index, const std::vector<int>& counts,
                                        int64_t slot, uint64_t seed) {
  const TableSpec& table = model.tables[static_cast<size_t>(table_index)];
  const auto bytes = testing::filled_table(table, seed);
  const auto ids = ids_for_ranks(model, table_index, counts, seed);
  for (const PlacementOps& ops : placement_registry()) {
    const Placement placement = ops.id;
    auto run = testing::run_placement(placement, table, bytes, ids, slot, seed);
    for (size_t r = 0; r < ids.size(); ++r) {
      ASSERT_TRUE(run.statuses[r].is_ok()) << placement_name(placement) << ": " << run.statuses[r].to_string();
      const auto want = testing::direct_lookup(table, bytes, ids[r]);
      EXPECT_EQ(first_difference(run.output[r], want), -1)
          << placement_name(placement) << " group " << ids.size() << " rank " << r;
    }
  }
}

TEST(LookupPlacements, TinyPresetEveryGroupSizeEveryPlacement) {
  auto tiny = model_preset("tiny");  // 4 heads per table, dim 64, FP8 rows
  ASSERT_TRUE(tiny.is_ok());
  for (int group = 1; group <= 5; ++group) {
    std::vector<int> counts;
    for (int r = 0; r < group; ++r) counts.push_back((r * 3 + 2) % 7);  // uneven, some ranks idle
    for (int table = 0; table < 2; ++table) expect_all_placements_equal_direct(*tiny, table, counts, 8, 100 + group);
  }
}

TEST(LookupPlacements, Bf16RowsAndHeadsThatDoNotDivideTheGroup) {
  // 3 orders x 1 head = 3 heads over groups of 2, 4 and 6: shards short and empty.
  auto spec = make_model_spec("bf16", 50, {1}, {1, 2, 3}, 1, RowFormat::kBf16, 8, 9);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  for (int group : {2, 4, 6}) {
    std::vector<int> counts(static_cast<size_t>(group), 3);
    counts[0] = 0;
    expect_all_placements_equal_direct(*spec, 0, counts, 5, 7 + static_cast<uint64_t>(group));
  }
}

TEST(LookupPlacements, AllDeadReplicaGetsZeroRows) {
  auto tiny = model_preset("tiny");
  ASSERT_TRUE(tiny.is_ok());
  const TableSpec& table = tiny->tables[0];
  const auto bytes = testing::filled_table(table, 3);
  std::vector<std::vector<int64_t>> ids = {std::vector<int64_t>(3 * 4, kDeadId), {0, 500, 1000, 1500}};
  for (const PlacementOps& ops : placement_registry()) {
    const Placement placement = ops.id;
    auto run = testing::run_placement(placement, table, bytes, ids, 4, 3);
    ASSERT_TRUE(run.statuses[0].is_ok() && run.statuses[1].is_ok()) << placement_name(placement);
    for (uint16_t v : run.output[0]) ASSERT_EQ(v, 0) << placement_name(placement);
    EXPECT_EQ(first_difference(run.output[1], testing::direct_lookup(table, bytes, ids[1])), -1);
  }
}

TEST(LookupPlacements, GatherReferencesAgreeWithTheCoreRowLoops) {
  auto tiny = model_preset("tiny");
  ASSERT_TRUE(tiny.is_ok());
  const TableSpec& table = tiny->tables[1];
  const auto bytes = testing::filled_table(table, 11);
  const auto ids = ids_for_ranks(*tiny, 1, {40}, 11)[0];
  for (int shards = 1; shards <= 7; ++shards) {
    const RowShardLayout layout(table.row_count(), shards);
    std::vector<std::span<const std::byte>> views;
    for (int s = 0; s < shards; ++s)
      views.push_back(std::span(bytes).subspan(static_cast<size_t>(layout.shard_begin(s)) * table.row_bytes(),
                                               static_cast<size_t>(layout.shard_rows(s)) * table.row_bytes()));
    std::vector<uint16_t> peer(ids.size() * static_cast<size_t>(table.dim), 0x1234);
    kernels::gather_peer_reference(table, layout, views, ids, peer);
    EXPECT_EQ(first_difference(peer, testing::direct_lookup(table, bytes, ids)), -1) << shards;

    // The owned gathers of all shards, summed as the collective would, are the direct lookup.
    std::vector<uint16_t> summed(peer.size(), 0);
    for (int s = 0; s < shards; ++s) {
      std::vector<uint16_t> owned(peer.size(), 0x1234);
      kernels::gather_owned_reference(table, layout, s, views[static_cast<size_t>(s)], ids, owned);
      for (size_t i = 0; i < owned.size(); ++i)
        summed[i] = float_to_bf16(bf16_to_float(summed[i]) + bf16_to_float(owned[i]));
    }
    EXPECT_EQ(first_difference(summed, peer), -1) << shards;
  }
}

TEST(LookupPlacements, WrongTableBytesAreNamedErrors) {
  auto tiny = model_preset("tiny");
  ASSERT_TRUE(tiny.is_ok());
  const TableSpec& table = tiny->tables[0];
  const auto bytes = testing::filled_table(table, 1);
  auto run = sim::run_ranks(2, 1, [&](int rank, Collectives& world) -> Status {
    std::vector<int64_t> ids(4, kDeadId);
    std::vector<uint16_t> out(4 * 64);
    LookupRequest request{&table, ids, 2, out};
    const auto short_table = std::span(bytes).first(bytes.size() - 1);
    ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<Collectives> solo, world.split(rank, 0));  // TP1: its own replica
    Status shared = lookup_host_shared(*solo, request, short_table);
    if (shared.code() != ErrorCode::kInvalidArgument || shared.message().find("host_shared") == std::string::npos)
      return internal_error("host_shared: " + shared.to_string());
    Status priv = lookup_host_private(*solo, request, short_table);
    if (priv.code() != ErrorCode::kInvalidArgument) return internal_error("host_private: " + priv.to_string());
    if (priv.context().rank != rank) return internal_error("host_private's error must name the rank");
    return Status::ok();
  });
  for (const Status& s : run.statuses) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

}  // namespace
}  // namespace engram
