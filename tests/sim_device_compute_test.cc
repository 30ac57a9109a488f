// The emulator's DeviceCompute: the calls a GPU lookup is made of, on
// emulated device memory. Every gather equals the kernels' CPU reference
// (DEAD, out-of-table and another slice's ids give zero rows), the device
// fill writes the CPU fill's bytes, registered host memory is readable at
// the address handed out and a leak when left registered, and the collective
// over row ranges equals the direct lookup on every rank, with a rank over
// the DP slot failing alone while its peers finish.
#include "sim/sim_device_compute.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/engines/engine_profile.h"
#include "core/lookup/device_lookup.h"
#include "core/model/row_format.h"
#include "core/lookup/shard_layout.h"
#include "core/model/table_fill.h"
#include "kernels/gather_reference.h"
#include "sim/sim_device_memory.h"
#include "sim/world.h"

namespace engram {
namespace {

TableSpec small_table(RowFormat format, int dim = 64) {
  auto spec = make_model_spec("device-compute", 400, {3}, {2, 3}, 3, format, dim, 11);
  EXPECT_TRUE(spec.is_ok());
  return spec->tables[0];
}

sim::WorldSpec one_host(int gpus) {
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("h200-", 1, gpus, "H200");
  return spec;
}

std::vector<int64_t> random_ids(const TableSpec& t, int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(tokens * t.head_count()));
  for (auto& id : ids) {
    const uint64_t draw = rng() % 20;
    id = draw == 0 ? kDeadId : draw == 1 ? t.row_count() + static_cast<int64_t>(rng() % 50)
                                         : static_cast<int64_t>(rng() % static_cast<uint64_t>(t.row_count()));
  }
  return ids;
}

std::vector<uint16_t> direct(const TableSpec& t, std::span<const std::byte> whole, std::span<const int64_t> ids) {
  std::vector<uint16_t> out(ids.size() * static_cast<size_t>(t.dim));
  const RowShardLayout layout(t.row_count(), 1);
  const std::span<const std::byte> only = whole;
  kernels::gather_peer_reference(t, layout, std::span(&only, 1), ids, out);
  return out;
}

Result<DevicePtr> upload(DeviceCompute& c, std::span<const std::byte> bytes) {
  ENGRAM_ASSIGN_OR_RETURN(DevicePtr p, c.allocate(bytes.size()));
  ENGRAM_RETURN_IF_ERROR(c.copy_to_device(p, bytes));
  return p;
}

template <typename T>
Result<std::vector<T>> download(DeviceCompute& c, DevicePtr p, size_t count) {
  std::vector<T> out(count);
  ENGRAM_RETURN_IF_ERROR(c.copy_to_host(std::as_writable_bytes(std::span(out)), p));
  return out;
}

// Whole tokens' rows from `shard_count` shards found by owner search.
DeviceGather shard_gather(const TableSpec& t, DevicePtr ids, int64_t tokens, DevicePtr shard_starts,
                          DevicePtr shard_bases, int shard_count, DevicePtr out) {
  return DeviceGather{.ids = ids, .tokens = tokens, .ids_per_token = t.head_count(), .head_count = t.head_count(),
                      .shard_starts = shard_starts, .shard_bases = shard_bases, .shard_count = shard_count,
                      .layout = device_row_layout(t), .out = out};
}

// Every rank of the run returned ok and the ledger holds nothing.
void expect_every_rank_ok_and_nothing_left(const Result<sim::WorldRun>& run) {
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  for (const auto& s : run->statuses) EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

// One table whole on one emulated GPU, `ids` gathered from it (a token per
// id row of head_count ids); every allocation given back.
Result<std::vector<uint16_t>> gather_whole_on_emulator(const TableSpec& t, std::span<const std::byte> whole,
                                                       std::span<const int64_t> ids) {
  std::vector<uint16_t> got;
  auto run = sim::run_world(one_host(1), [&](RankBackend& b) -> Status {
    DeviceCompute& c = *b.compute;
    const std::vector<int64_t> shard_starts = {0, t.row_count()};
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr shard, upload(c, whole));
    const std::vector<DevicePtr> bases = {shard};
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr starts, upload(c, std::as_bytes(std::span(shard_starts))));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr base_table, upload(c, std::as_bytes(std::span(bases))));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr ids_d, upload(c, std::as_bytes(ids)));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr out_d, c.allocate(ids.size() * t.dim * 2));
    const DeviceGather g =
        shard_gather(t, ids_d, static_cast<int64_t>(ids.size()) / t.head_count(), starts, base_table, 1, out_d);
    ENGRAM_RETURN_IF_ERROR(c.gather(g, {}));
    ENGRAM_ASSIGN_OR_RETURN(got, download<uint16_t>(c, out_d, ids.size() * t.dim));
    for (DevicePtr p : {shard, starts, base_table, ids_d, out_d}) ENGRAM_RETURN_IF_ERROR(c.free(p));
    return Status::ok();
  });
  expect_every_rank_ok_and_nothing_left(run);
  if (!run.is_ok()) return run.status();
  return got;
}

TEST(SimDeviceCompute, ShardGatherAndDeviceFillEqualTheCpuRule) {
  for (RowFormat format : {RowFormat::kFp8E4M3Ue8m0, RowFormat::kBf16}) {
    const TableSpec t = small_table(format);
    std::vector<std::byte> whole(t.table_bytes());
    fill_table_rows(t, 5, 0, whole);
    auto run = sim::run_world(one_host(1), [&](RankBackend& b) -> Status {
      DeviceCompute& c = *b.compute;
      // Three shards filled on the device; the shard table uploaded once.
      const RowShardLayout layout(t.row_count(), 3);
      std::vector<DevicePtr> bases;
      for (int s = 0; s < 3; ++s) {
        ENGRAM_ASSIGN_OR_RETURN(DevicePtr shard, c.allocate(layout.shard_rows(s) * t.row_bytes()));
        ENGRAM_RETURN_IF_ERROR(c.fill_table_rows(shard, t, 5, layout.shard_begin(s), layout.shard_rows(s), {}));
        bases.push_back(shard);
        ENGRAM_ASSIGN_OR_RETURN(auto bytes, download<std::byte>(c, shard, layout.shard_rows(s) * t.row_bytes()));
        const auto expected = std::span(whole).subspan(layout.shard_begin(s) * t.row_bytes(), bytes.size());
        if (!std::equal(bytes.begin(), bytes.end(), expected.begin()))
          return internal_error("the device fill differs from the CPU fill");
      }
      const std::vector<int64_t> shard_starts = layout.starts();
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr starts, upload(c, std::as_bytes(std::span(shard_starts))));
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr base_table, upload(c, std::as_bytes(std::span(bases))));
      const int64_t tokens = 37;
      const auto ids = random_ids(t, tokens, 9);
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr ids_d, upload(c, std::as_bytes(std::span(ids))));
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr out_d, c.allocate(ids.size() * t.dim * 2));
      ENGRAM_RETURN_IF_ERROR(c.fill_async(out_d, 0x5a, ids.size() * t.dim * 2, {}));  // poison: every value is written
      DeviceGather g = shard_gather(t, ids_d, tokens, starts, base_table, 3, out_d);
      ENGRAM_RETURN_IF_ERROR(c.gather(g, {}));
      ENGRAM_ASSIGN_OR_RETURN(auto got, download<uint16_t>(c, out_d, ids.size() * t.dim));
      if (got != direct(t, whole, ids)) return internal_error("shard gather differs from the CPU rule");
      // A window over a shard source is refused: shards hold rows, not heads.
      g.head_begin = 1;
      g.head_count = 2;
      if (c.gather(g, {}).code() != ErrorCode::kInvalidArgument) return internal_error("window over shards accepted");
      for (DevicePtr p : bases) ENGRAM_RETURN_IF_ERROR(c.free(p));
      for (DevicePtr p : {starts, base_table, ids_d, out_d}) ENGRAM_RETURN_IF_ERROR(c.free(p));
      return Status::ok();
    });
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    EXPECT_TRUE(run->all_ok()) << run->summary();
    EXPECT_TRUE(run->leaks.empty()) << run->summary();
  }
}

// The emulator decodes scale bytes 0 and 255 by the table's rule (the CUDA
// kernels refuse SGLang's): every row under SGLang's rule equals the CPU
// reference, and differs from vLLM's where the fill wrote those bytes.
TEST(SimDeviceCompute, GatherFollowsTheTablesScaleByteRule) {
  TableSpec t = small_table(RowFormat::kFp8E4M3Ue8m0);
  t.scale_byte_rule = ScaleByteRule::kSglang;
  std::vector<std::byte> whole(t.table_bytes());
  fill_table_rows(t, 5, 0, whole);
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < t.row_count(); ++r) ids.push_back(r);
  while (ids.size() % static_cast<size_t>(t.head_count()) != 0) ids.push_back(kDeadId);
  const std::vector<uint16_t> want = direct(t, whole, ids);
  TableSpec vllm = t;
  vllm.scale_byte_rule = ScaleByteRule::kVllm;
  EXPECT_NE(want, direct(vllm, whole, ids)) << "the fill wrote no scale byte 0 or 255";
  const Result<std::vector<uint16_t>> got = gather_whole_on_emulator(t, whole, ids);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_TRUE(*got == want) << "the emulator's gather ignores the table's scale_byte_rule";
}

// Every FP8 byte under every scale byte, decoded on the emulator's device
// path by each engine's rule (its profile's): row e holds the 256 FP8 codes
// scaled by byte e. The emulator equals core's CPU decoding (which
// scale_byte_rule_test.cc holds to the formats' definitions) bit for bit,
// -0 written +0, and the two rules differ exactly at scale bytes 0 and 255.
TEST(SimDeviceCompute, EveryFp8ByteTimesEveryScaleByteUnderEachEnginesRule) {
  std::vector<std::vector<uint16_t>> by_engine;
  for (const EngineProfile& engine : engine_registry()) {
    SCOPED_TRACE(engine.name);
    TableSpec t;
    t.layer_id = 1;
    t.orders = {2};
    t.heads_per_order = 1;
    t.primes = {256};
    t.dim = 256;
    t.scale_byte_rule = engine.scale_byte_rule;  // the scale bytes alone: -0 written +0 here
    std::vector<std::byte> whole(t.table_bytes());
    for (int e = 0; e < 256; ++e) {
      std::byte* row = whole.data() + static_cast<size_t>(e) * t.row_bytes();
      for (int code = 0; code < 256; ++code) row[code] = static_cast<std::byte>(code);
      for (int block = 0; block < t.dim / kScaleBlock; ++block) row[t.dim + block] = static_cast<std::byte>(e);
    }
    std::vector<int64_t> ids;
    for (int64_t r = 0; r < 256; ++r) ids.push_back(r);
    ids.push_back(kDeadId);
    std::vector<uint16_t> want(ids.size() * 256, 0);
    for (int e = 0; e < 256; ++e) {
      const auto out = std::span(want).subspan(static_cast<size_t>(e) * 256, 256);
      dequantize_row(t, std::span<const std::byte>(whole).subspan(static_cast<size_t>(e) * t.row_bytes(), t.row_bytes()),
                     out);
      for (uint16_t& v : out) v = bf16_lookup_canonical(v);
    }
    Result<std::vector<uint16_t>> gathered = gather_whole_on_emulator(t, whole, ids);
    ASSERT_TRUE(gathered.is_ok()) << gathered.status().to_string();
    std::vector<uint16_t> got = std::move(gathered).value();
    int mismatches = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (bf16_lookup_canonical(got[i]) != want[i] && ++mismatches <= 4)
        ADD_FAILURE() << "scale byte " << i / 256 << " fp8 0x" << std::hex << i % 256 << ": emulator 0x" << got[i]
                      << ", CPU 0x" << want[i];
    EXPECT_EQ(mismatches, 0);
    by_engine.push_back(std::move(got));
  }
  // engramlab and vLLM decode alike; SGLang's CUDA kernel differs only in row 0 (2^-127; 255 is +inf for all).
  ASSERT_EQ(by_engine.size(), 3u);
  EXPECT_EQ(by_engine[0], by_engine[1]);
  for (int e = 0; e < 256; ++e) {
    const bool same = std::equal(by_engine[1].begin() + e * 256, by_engine[1].begin() + (e + 1) * 256,
                                 by_engine[2].begin() + e * 256);
    EXPECT_EQ(same, e != 0) << "scale byte " << e;
  }
}

TEST(SimDeviceCompute, RegisteredHostSliceGathersItsHeadWindowAndALeftRegistrationIsALeak) {
  const TableSpec t = small_table(RowFormat::kFp8E4M3Ue8m0);
  std::vector<std::byte> whole(t.table_bytes());
  fill_table_rows(t, 5, 0, whole);
  // Heads 2..3 of 6: their rows are a contiguous slice of the table.
  const int head_begin = 2, head_count = 2;
  const int64_t first = t.head_offset(head_begin);
  const int64_t rows = t.head_offset(head_begin + head_count) - first;
  const auto slice = std::span<const std::byte>(whole).subspan(first * t.row_bytes(), rows * t.row_bytes());
  for (bool unregister : {true, false}) {
    auto run = sim::run_world(one_host(1), [&](RankBackend& b) -> Status {
      DeviceCompute& c = *b.compute;
      ENGRAM_RETURN_IF_ERROR(c.prepare_lookups(64 * head_count, t.row_bytes(), true));
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr base, c.register_host(slice));
      const int64_t tokens = 40;
      const auto ids = random_ids(t, tokens, 21);
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr ids_d, upload(c, std::as_bytes(std::span(ids))));
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr out_d, c.allocate(tokens * head_count * t.dim * 2));
      DeviceGather g;
      g.ids = ids_d;
      g.tokens = tokens;
      g.ids_per_token = t.head_count();
      g.head_begin = head_begin;
      g.head_count = head_count;
      g.range_first_row = first;
      g.range_row_count = rows;
      g.range_base = base;
      g.host_rows = slice.data();
      g.layout = device_row_layout(t);
      g.out = out_d;
      ENGRAM_RETURN_IF_ERROR(c.gather(g, {}));
      ENGRAM_ASSIGN_OR_RETURN(auto got, download<uint16_t>(c, out_d, tokens * head_count * t.dim));
      // Expected: the window's ids, with ids outside the slice as zero rows.
      std::vector<int64_t> window;
      for (int64_t k = 0; k < tokens; ++k)
        for (int h = head_begin; h < head_begin + head_count; ++h) {
          const int64_t id = ids[static_cast<size_t>(k * t.head_count() + h)];
          window.push_back(id >= first && id < first + rows ? id : kDeadId);
        }
      std::vector<uint16_t> expected(window.size() * t.dim, 0);
      for (size_t k = 0; k < window.size(); ++k) {
        if (window[k] == kDeadId) continue;
        kernels::row_reference(t, std::span(whole).subspan(window[k] * t.row_bytes(), t.row_bytes()),
                               std::span(expected).subspan(k * t.dim, t.dim));
      }
      if (got != expected) return internal_error("host slice gather differs from the CPU rule");
      // More rows than prepared for is refused, naming the fix.
      g.tokens = 65;
      const Status too_many = c.gather(g, {});
      if (too_many.code() != ErrorCode::kInvalidArgument ||
          too_many.message().find("tokens_per_rank_max") == std::string::npos)
        return internal_error("a gather past the prepared size was not refused: " + too_many.to_string());
      for (DevicePtr p : {ids_d, out_d}) ENGRAM_RETURN_IF_ERROR(c.free(p));
      if (unregister) ENGRAM_RETURN_IF_ERROR(c.unregister_host(slice));
      return Status::ok();
    });
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    EXPECT_TRUE(run->all_ok()) << run->summary();
    if (unregister) {
      EXPECT_TRUE(run->leaks.empty()) << run->summary();
    } else {
      ASSERT_EQ(run->leaks.size(), 1u) << run->summary();
      EXPECT_EQ(run->leaks[0].kind, sim::ResourceKind::kHostRegistration);
    }
  }
}

TEST(SimDeviceCompute, CollectiveOverRowRangesEqualsTheDirectLookupAndAnOverrunningRankFailsAlone) {
  const TableSpec t = small_table(RowFormat::kFp8E4M3Ue8m0);
  std::vector<std::byte> whole(t.table_bytes());
  fill_table_rows(t, 5, 0, whole);
  const int ranks = 4;
  const int64_t slot = 12;
  const int64_t tokens_of[ranks] = {12, 0, 7, 13};  // rank 3 brings more than the slot
  auto run = sim::run_world(one_host(ranks), [&](RankBackend& b) -> Status {
    DeviceCompute& c = *b.compute;
    const int me = b.world_rank;
    ENGRAM_ASSIGN_OR_RETURN(auto group, c.connect(*b.world));
    const RowShardLayout layout(t.row_count(), ranks);
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr shard, c.allocate(std::max<int64_t>(1, layout.shard_rows(me)) * t.row_bytes()));
    ENGRAM_RETURN_IF_ERROR(c.fill_table_rows(shard, t, 5, layout.shard_begin(me), layout.shard_rows(me), {}));
    ModelSpec model;
    model.tables = {t};
    ENGRAM_ASSIGN_OR_RETURN(CollectiveWorkspace w, make_collective_workspace(c, slot, model, ranks, me));
    const int64_t tokens = tokens_of[me];
    const auto ids = random_ids(t, tokens, 100 + me);
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr ids_d, upload(c, std::as_bytes(std::span(ids))));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr out_d, c.allocate(std::max<size_t>(1, ids.size()) * t.dim * 2));
    DeviceLookupRequest r;
    r.table = &t;
    r.row_ids = ids_d;
    r.tokens = tokens;
    r.tokens_per_rank_max = slot;
    r.output = out_d;
    OwnedRows owned{layout.shard_begin(me), layout.shard_rows(me), shard, nullptr};
    Status looked = lookup_collective_on_device(c, *group, w, owned, 0, r, me, GroupHeaders::kNone);
    Status checked;
    if (me == 3) {
      if (looked.code() != ErrorCode::kInvalidArgument || looked.message().find("tokens_per_rank_max") == std::string::npos)
        checked = internal_error("the overrunning rank did not get its slot error: " + looked.to_string());
    } else if (!looked.is_ok()) {
      checked = looked;
    } else if (tokens > 0) {
      auto got = download<uint16_t>(c, out_d, ids.size() * t.dim);
      if (!got.is_ok()) checked = got.status();
      else if (*got != direct(t, whole, ids)) checked = internal_error("collective lookup differs from the direct lookup");
    }
    ENGRAM_RETURN_IF_ERROR(free_collective_workspace(c, w));
    for (DevicePtr p : {shard, ids_d, out_d}) ENGRAM_RETURN_IF_ERROR(c.free(p));
    return checked;
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << run->summary();
}

}  // namespace
}  // namespace engram

namespace engram {
namespace {

// Zeroed device memory gives its pages back and reads zeros; an all-gather's
// output is shared between members, and a write to one member's copy leaves
// the others' as gathered (copy on write).
TEST(SimDeviceCompute, ZeroFillDropsPagesAndGatheredPagesAreCopiedOnWrite) {
  auto spec = one_host(3);
  auto run = sim::run_world(spec, [](RankBackend& b) -> Status {
    DeviceCompute& c = *b.compute;
    constexpr uint64_t kBytesPerRank = 3 * sim::kSimPageBytes + 100;  // whole pages and a ragged tail
    std::vector<std::byte> mine(kBytesPerRank);
    for (uint64_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<std::byte>(b.world_rank * 7 + i % 251);
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr in, upload(c, mine));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr all, c.allocate(kBytesPerRank * 3));
    ENGRAM_ASSIGN_OR_RETURN(auto group, c.connect(*b.world));
    ENGRAM_RETURN_IF_ERROR(group->all_gather(in, all, kBytesPerRank, StreamRef{}));
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    // Rank 1 overwrites a byte of every member's block in its own copy.
    if (b.world_rank == 1)
      for (uint64_t r = 0; r < 3; ++r) {
        const std::byte mark{0xee};
        ENGRAM_RETURN_IF_ERROR(c.copy_to_device(all + r * kBytesPerRank + 5, std::span(&mark, 1)));
      }
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    ENGRAM_ASSIGN_OR_RETURN(auto got, download<std::byte>(c, all, kBytesPerRank * 3));
    for (uint64_t r = 0; r < 3; ++r)
      for (uint64_t i = 0; i < kBytesPerRank; ++i) {
        std::byte want = static_cast<std::byte>(r * 7 + i % 251);
        if (b.world_rank == 1 && i == 5) want = std::byte{0xee};
        if (got[r * kBytesPerRank + i] != want)
          return internal_error(fmt::format("rank {}: byte {} of rank {}'s block differs", b.world_rank, i, r));
      }
    // A zero fill over part of a page and whole pages reads zeros and keeps the rest.
    ENGRAM_RETURN_IF_ERROR(c.fill_async(all + 10, 0, 2 * sim::kSimPageBytes, StreamRef{}));
    ENGRAM_ASSIGN_OR_RETURN(auto zeroed, download<std::byte>(c, all, kBytesPerRank * 3));
    for (uint64_t i = 0; i < zeroed.size(); ++i) {
      const bool in_fill = i >= 10 && i < 10 + 2 * sim::kSimPageBytes;
      if (in_fill ? zeroed[i] != std::byte{0} : zeroed[i] != got[i])
        return internal_error(fmt::format("rank {}: byte {} after the zero fill", b.world_rank, i));
    }
    ENGRAM_RETURN_IF_ERROR(c.free(all));
    return c.free(in);
  });
  expect_every_rank_ok_and_nothing_left(run);
}

TEST(SimDeviceCompute, ReplicasFillingTheSameRowsSharePagesCopiedOnWrite) {
  const TableSpec t = small_table(RowFormat::kBf16);
  constexpr int64_t kFirstRow = 7, kRows = 50;  // 6,400 bytes: whole pages and a ragged tail
  std::vector<std::byte> want(static_cast<size_t>(kRows) * t.row_bytes());
  fill_table_rows(t, 5, kFirstRow, want);
  auto run = sim::run_world(one_host(3), [&](RankBackend& b) -> Status {
    DeviceCompute& c = *b.compute;
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr rows, c.allocate(want.size()));
    ENGRAM_RETURN_IF_ERROR(c.fill_table_rows(rows, t, 5, kFirstRow, kRows, {}));
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    // Every rank's fill is the one kept for the run: made once.
    auto* memory = dynamic_cast<sim::SimDeviceMemory*>(b.device);
    if (memory == nullptr) return internal_error("not the emulator's device memory");
    int made = 0;
    auto kept = memory->world().shared_content(sim::SimDeviceCompute::table_rows_key(t, 5, kFirstRow, kRows),
                                               want.size(), [&](std::span<std::byte>) { ++made; });
    if (kept == nullptr || made != 0 || *kept != want)
      return internal_error(fmt::format("rank {}: the fill was not kept once for the run", b.world_rank));
    // Rank 2 overwrites a byte in a shared page and one in the tail.
    if (b.world_rank == 2) {
      const std::byte mark{0xee};
      ENGRAM_RETURN_IF_ERROR(c.copy_to_device(rows + 3, std::span(&mark, 1)));
      ENGRAM_RETURN_IF_ERROR(c.copy_to_device(rows + want.size() - 1, std::span(&mark, 1)));
    }
    ENGRAM_RETURN_IF_ERROR(b.world->barrier());
    ENGRAM_ASSIGN_OR_RETURN(auto got, download<std::byte>(c, rows, want.size()));
    for (size_t i = 0; i < want.size(); ++i) {
      const bool marked = b.world_rank == 2 && (i == 3 || i == want.size() - 1);
      if (got[i] != (marked ? std::byte{0xee} : want[i]))
        return internal_error(fmt::format("rank {}: byte {} differs", b.world_rank, i));
    }
    return c.free(rows);
  });
  expect_every_rank_ok_and_nothing_left(run);
}

// The owned-rows gather over an all-gathered ids buffer (one shared extent
// on every member) finds its ids in the buffer's sorted index; the same
// gather over a private copy of those ids scans them. Both must write the
// same bytes, equal to the CPU rule: owned ids' rows, nothing for DEAD,
// out-of-table, negative or another rank's ids, duplicates each written.
TEST(SimDeviceCompute, OwnedGatherOverAllGatheredIdsEqualsTheScanOfACopy) {
  const TableSpec t = small_table(RowFormat::kFp8E4M3Ue8m0);
  std::vector<std::byte> whole(t.table_bytes());
  fill_table_rows(t, 5, 0, whole);
  constexpr int kRanks = 3;
  constexpr int64_t kTokens = 40;
  const uint64_t ids_per_rank = static_cast<uint64_t>(kTokens * t.head_count());
  auto run = sim::run_world(one_host(kRanks), [&](RankBackend& b) -> Status {
    DeviceCompute& c = *b.compute;
    std::vector<int64_t> mine = random_ids(t, kTokens, 40 + static_cast<uint64_t>(b.world_rank));
    mine[0] = -7;                   // negative, not DEAD
    mine[1] = mine[2] = mine[3];    // duplicates
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr in, upload(c, std::as_bytes(std::span(mine))));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr all, c.allocate(ids_per_rank * 8 * kRanks));
    ENGRAM_ASSIGN_OR_RETURN(auto group, c.connect(*b.world));
    ENGRAM_RETURN_IF_ERROR(group->all_gather(in, all, ids_per_rank * 8, StreamRef{}));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr copy, c.allocate(ids_per_rank * 8 * kRanks));
    ENGRAM_RETURN_IF_ERROR(c.copy_async(copy, all, ids_per_rank * 8 * kRanks, StreamRef{}));
    auto* memory = dynamic_cast<sim::SimDeviceMemory*>(b.device);
    if (memory == nullptr) return internal_error("not the emulator's device memory");
    ENGRAM_ASSIGN_OR_RETURN(auto shared, memory->shared_view(all, ids_per_rank * 8 * kRanks));
    ENGRAM_ASSIGN_OR_RETURN(auto copied, memory->shared_view(copy, ids_per_rank * 8 * kRanks));
    if (!shared || copied) return internal_error("the all-gather's output should be shared and the copy private");
    // This rank's row range of the table, on its device.
    const RowShardLayout layout(t.row_count(), kRanks);
    const int64_t first = layout.shard_begin(b.world_rank), rows = layout.shard_rows(b.world_rank);
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr shard, c.allocate(static_cast<uint64_t>(rows) * t.row_bytes()));
    ENGRAM_RETURN_IF_ERROR(c.fill_table_rows(shard, t, 5, first, rows, StreamRef{}));
    const uint64_t out_bytes = ids_per_rank * kRanks * static_cast<uint64_t>(t.dim) * 2;
    std::vector<std::vector<uint16_t>> outs;
    for (DevicePtr ids : {all, copy}) {
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr out, c.allocate(out_bytes));
      ENGRAM_RETURN_IF_ERROR(c.fill_async(out, 0, out_bytes, StreamRef{}));
      DeviceGather g;
      g.ids = ids;
      g.tokens = kTokens * kRanks;
      g.ids_per_token = t.head_count();
      g.head_count = t.head_count();
      g.range_first_row = first;
      g.range_row_count = rows;
      g.range_base = shard;
      g.layout = device_row_layout(t);
      g.out = out;
      ENGRAM_RETURN_IF_ERROR(c.gather(g, StreamRef{}));
      ENGRAM_ASSIGN_OR_RETURN(auto got, download<uint16_t>(c, out, out_bytes / 2));
      outs.push_back(std::move(got));
      ENGRAM_RETURN_IF_ERROR(c.free(out));
    }
    if (outs[0] != outs[1]) return internal_error(fmt::format("rank {}: the indexed gather differs from the scan", b.world_rank));
    // Against the CPU rule: the owned ids' rows, zeros elsewhere.
    ENGRAM_ASSIGN_OR_RETURN(auto gathered, download<int64_t>(c, all, ids_per_rank * kRanks));
    std::vector<int64_t> owned_only = gathered;
    for (auto& id : owned_only)
      if (id < first || id >= first + rows) id = kDeadId;
    if (outs[0] != direct(t, whole, owned_only))
      return internal_error(fmt::format("rank {}: the gather differs from the CPU rule", b.world_rank));
    for (DevicePtr p : {shard, copy, all, in}) ENGRAM_RETURN_IF_ERROR(c.free(p));
    return Status::ok();
  });
  expect_every_rank_ok_and_nothing_left(run);
}

// copy_to_host_strided reads what one copy per row reads, from private and
// from all-gathered memory; a bad shape is an invalid_argument naming the
// field, and a span past the allocation the driver's illegal address.
TEST(SimDeviceCompute, StridedCopyReadsEveryRowAndRefusesBadShapes) {
  auto run = sim::run_world(one_host(2), [](RankBackend& b) -> Status {
    DeviceCompute& c = *b.compute;
    constexpr uint64_t kPitch = 3 * sim::kSimPageBytes / 2 + 8, kRow = 16, kRows = 5;
    std::vector<std::byte> mine(kPitch * kRows);
    for (uint64_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<std::byte>(b.world_rank * 31 + i % 253);
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr plain, upload(c, mine));
    ENGRAM_ASSIGN_OR_RETURN(DevicePtr all, c.allocate(mine.size() * 2));
    ENGRAM_ASSIGN_OR_RETURN(auto group, c.connect(*b.world));
    ENGRAM_RETURN_IF_ERROR(group->all_gather(plain, all, mine.size(), StreamRef{}));
    for (DevicePtr src : {plain, all + 24}) {
      const uint64_t rows = src == plain ? kRows : 2 * kRows - 1;
      std::vector<std::byte> got(rows * kRow), want(rows * kRow);
      ENGRAM_RETURN_IF_ERROR(c.copy_to_host_strided(got, src, kRow, kPitch));
      for (uint64_t k = 0; k < rows; ++k)
        ENGRAM_RETURN_IF_ERROR(c.copy_to_host(std::span(want).subspan(k * kRow, kRow), src + k * kPitch));
      if (got != want) return internal_error(fmt::format("rank {}: the strided copy differs", b.world_rank));
    }
    std::vector<std::byte> out(4 * kRow);
    for (auto [row_bytes, pitch, field] : {std::tuple{uint64_t{0}, kPitch, "row_bytes is 0"},
                                           std::tuple{uint64_t{24}, kPitch, "not whole rows of row_bytes 24"},
                                           std::tuple{kRow, uint64_t{8}, "src_pitch_bytes 8"}}) {
      Status bad = c.copy_to_host_strided(out, plain, row_bytes, pitch);
      if (bad.code() != ErrorCode::kInvalidArgument || bad.message().find(field) == std::string::npos)
        return internal_error(fmt::format("rank {}: expected invalid_argument with '{}', got {}", b.world_rank, field,
                                          bad.to_string()));
    }
    // Four rows at a pitch past the allocation's end.
    Status past = c.copy_to_host_strided(out, plain, kRow, 1ull << 20);
    if (past.is_ok() || past.message().find("ILLEGAL_ADDRESS") == std::string::npos)
      return internal_error(fmt::format("rank {}: a span past the allocation gave {}", b.world_rank, past.to_string()));
    ENGRAM_RETURN_IF_ERROR(c.free(all));
    return c.free(plain);
  });
  expect_every_rank_ok_and_nothing_left(run);
}

}  // namespace
}  // namespace engram
