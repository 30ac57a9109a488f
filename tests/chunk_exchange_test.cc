// The list form of the handle exchange on the emulator: several chunks per
// rank, counts and sizes differing between ranks, mapped back to back into
// one span per peer (SGLang's VMM utilities' tests, as ours); the no-export
// fallback; bad input refused by name on every rank with nothing left in the
// ledger.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/base/units.h"
#include "core/exchange/handle_exchange.h"
#include "sim/world.h"
#include "tests/every_byte_is.h"
#include "tests/exchange_worlds.h"

namespace engram {
namespace {

using sim::FaultSite;
using sim::WorldSpec;
using ::testing::HasSubstr;

using testing::host;
using testing::two_gb300_hosts_one_domain;
sim::WorldSpec one_host(int gpus = 8) { return testing::one_b300_host(gpus); }

// SGLang's fill byte for (rank, chunk).
std::byte fill_byte(int rank, int chunk) { return static_cast<std::byte>((rank * 16 + chunk + 1) & 0xFF); }

// Fills every own chunk whole, then reads every peer's every chunk back
// whole; checks the chunks lie back to back from their span's start.
Status fill_and_read_back(RankBackend& b, const SharedChunks& m) {
  const int me = m.group_rank();
  for (int c = 0; c < m.chunk_count(me); ++c) {
    std::vector<std::byte> mine(m.chunk_bytes(me, c), fill_byte(b.world_rank, c));
    ENGRAM_RETURN_IF_ERROR(b.device->copy_to_device(m.chunk(me, c), mine));
  }
  ENGRAM_RETURN_IF_ERROR(b.world->barrier());
  for (int p = 0; p < m.group_size(); ++p) {
    DevicePtr expected_at = m.span(p);
    for (int c = 0; c < m.chunk_count(p); ++c) {
      if (m.chunk(p, c) != expected_at) return internal_error("chunks do not lie back to back in the span");
      expected_at += m.chunk_bytes(p, c);
      std::vector<std::byte> got(m.chunk_bytes(p, c));
      ENGRAM_RETURN_IF_ERROR(b.device->copy_from_device(got, m.chunk(p, c)));
      if (!testing::every_byte_is(got, fill_byte(m.world_rank_of(p), c)))
        return internal_error(fmt::format("rank {} chunk {} reads a byte its owner did not write", p, c));
    }
    if (expected_at > m.span(p) + m.span_bytes(p)) return internal_error("chunks overrun the span");
  }
  return Status::ok();
}

struct RoundTrip {
  bool fabric;
  int chunks;
};

class ChunkHandleRoundtrip : public ::testing::TestWithParam<RoundTrip> {};

// SGLang's test_handle_roundtrip: POSIX and FABRIC x n_chunks {1, 3} of 2 MiB.
TEST_P(ChunkHandleRoundtrip, EveryRankReadsEveryPeersChunksAsWritten) {
  const RoundTrip c = GetParam();
  std::vector<HandleType> types(8, HandleType::kNone);
  auto run = sim::run_world(c.fabric ? two_gb300_hosts_one_domain() : one_host(), [&](RankBackend& b) -> Status {
    const std::vector<uint64_t> chunks(static_cast<size_t>(c.chunks), 2 * kMiB);
    ENGRAM_ASSIGN_OR_RETURN(SharedChunks m, exchange_shareable_chunks(b, *b.world, chunks));
    types[static_cast<size_t>(b.world_rank)] = m.handle_type();
    if (!m.shared()) return internal_error("not shared");
    for (int p = 0; p < m.group_size(); ++p)
      if (m.chunk_count(p) != c.chunks || m.span_bytes(p) != static_cast<uint64_t>(c.chunks) * 2 * kMiB)
        return internal_error("counts or spans differ from what each rank shared");
    ENGRAM_RETURN_IF_ERROR(fill_and_read_back(b, m));
    return m.teardown();
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
  for (HandleType t : types) EXPECT_EQ(t, c.fabric ? HandleType::kFabric : HandleType::kPosixFd);
}

INSTANTIATE_TEST_SUITE_P(Types, ChunkHandleRoundtrip,
                         ::testing::Values(RoundTrip{false, 1}, RoundTrip{false, 3}, RoundTrip{true, 1},
                                           RoundTrip{true, 3}),
                         [](const auto& info) {
                           return std::string(info.param.fabric ? "fabric" : "posix") + "_" +
                                  std::to_string(info.param.chunks) + "chunks";
                         });

// SGLang's test_register_graph_inputs_follows_widest_input: 20 chunks on odd
// ranks, 1 on even; every span is reserved as wide as the widest input.
TEST(ChunkExchange, GraphInputsFollowTheWidestInput) {
  for (bool fabric : {false, true}) {
    auto run = sim::run_world(fabric ? two_gb300_hosts_one_domain() : one_host(), [&](RankBackend& b) -> Status {
      const int count = b.world_rank % 2 ? 20 : 1;
      const std::vector<uint64_t> chunks(static_cast<size_t>(count), 2 * kMiB);
      ChunkExchangeOptions options;
      options.span_bytes_per_peer = 20 * 2 * kMiB;
      ENGRAM_ASSIGN_OR_RETURN(SharedChunks m, exchange_shareable_chunks(b, *b.world, chunks, options));
      for (int p = 0; p < m.group_size(); ++p) {
        if (m.chunk_count(p) != (m.world_rank_of(p) % 2 ? 20 : 1)) return internal_error("a peer's count differs");
        if (m.span(p) != m.span(0) + static_cast<uint64_t>(p) * 40 * kMiB) return internal_error("spans not widest");
      }
      ENGRAM_RETURN_IF_ERROR(fill_and_read_back(b, m));
      return m.teardown();
    });
    ASSERT_TRUE(run.is_ok());
    EXPECT_TRUE(run->all_ok()) << (fabric ? "fabric: " : "posix: ") << run->summary();
    EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
  }
}

TEST(ChunkExchange, UnequalSizesAndCountsPackEachPeersSpan) {
  auto run = sim::run_world(one_host(4), [&](RankBackend& b) -> Status {
    std::vector<uint64_t> chunks;
    for (int c = 0; c <= b.world_rank; ++c) chunks.push_back(static_cast<uint64_t>(c + 1) * 2 * kMiB);
    ENGRAM_ASSIGN_OR_RETURN(SharedChunks m, exchange_shareable_chunks(b, *b.world, chunks));
    for (int p = 0; p + 1 < m.group_size(); ++p)
      if (m.span(p + 1) != m.span(p) + m.span_bytes(p)) return internal_error("spans not packed");
    if (m.span_bytes(3) != (1 + 2 + 3 + 4) * 2 * kMiB) return internal_error("rank 3's span");
    ENGRAM_RETURN_IF_ERROR(fill_and_read_back(b, m));
    return m.teardown();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

// SGLang's test_default_handle_type_fallback: reject FABRIC -> POSIX; reject
// both -> none. The emulator models all three.
TEST(ChunkExchange, DefaultHandleTypeFallsBackFabricPosixNone) {
  WorldSpec no_imex;
  no_imex.hosts.push_back(host("h200-0", 2, "H200"));
  no_imex.hosts[0].fabric_attribute = true;  // the attribute lies: no IMEX channel
  WorldSpec neither = no_imex;
  neither.hosts[0].posix_fd_attribute = false;
  WorldSpec fabric = two_gb300_hosts_one_domain();
  for (auto [spec, expected] : {std::pair{fabric, HandleType::kFabric}, std::pair{no_imex, HandleType::kPosixFd},
                                std::pair{neither, HandleType::kNone}}) {
    std::vector<HandleType> got;
    auto run = sim::run_world(spec, [&](RankBackend& b) -> Status {
      ENGRAM_ASSIGN_OR_RETURN(HandleType t, default_handle_type(*b.device));
      if (b.world_rank == 0) got.push_back(t);
      return Status::ok();
    });
    ASSERT_TRUE(run.is_ok());
    EXPECT_TRUE(run->all_ok()) << run->summary();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], expected) << handle_type_name(got[0]);
    EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
  }
}

WorldSpec no_handle_type_works() {
  WorldSpec spec;
  spec.hosts.push_back(host("h200-0", 2, "H200"));
  spec.hosts[0].posix_fd_attribute = false;
  return spec;
}

TEST(ChunkExchange, WithoutAnyHandleTypeTheExchangeSaysWhyAndLeavesNothing) {
  auto run = sim::run_world(no_handle_type_works(), [&](RankBackend& b) -> Status {
    const uint64_t chunks[] = {2 * kMiB};
    return exchange_shareable_chunks(b, *b.world, chunks).status();
  });
  ASSERT_TRUE(run.is_ok());
  for (const Status& s : run->statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.to_string();
    EXPECT_EQ(s.context().step, "handle_type");
    EXPECT_THAT(s.message(), HasSubstr("POSIX fd handles are not supported on h200-0"));
  }
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

TEST(ChunkExchange, AConsumerThatCanLiveWithoutSharingGetsPlainMemory) {
  for (WorldSpec spec : {no_handle_type_works(), [] {
         // Two hosts, no NVLink domain: POSIX cannot reach, FABRIC is missing.
         WorldSpec s;
         s.hosts = {host("h200-0", 2, "H200"), host("h200-1", 2, "H200")};
         return s;
       }()}) {
    auto run = sim::run_world(spec, [&](RankBackend& b) -> Status {
      const std::vector<uint64_t> chunks(2, 2 * kMiB);
      ChunkExchangeOptions options;
      options.allow_unshared = true;
      ENGRAM_ASSIGN_OR_RETURN(SharedChunks m, exchange_shareable_chunks(b, *b.world, chunks, options));
      if (m.shared() || m.handle_type() != HandleType::kNone) return internal_error("claims to be shared");
      if (m.unshared_reason().code() != ErrorCode::kFailedPrecondition ||
          m.unshared_reason().message().find("no shareable handle type works") == std::string::npos)
        return internal_error("no reason: " + m.unshared_reason().to_string());
      const int me = m.group_rank();
      std::vector<std::byte> bytes(m.chunk_bytes(me, 1), fill_byte(b.world_rank, 1)), back(bytes.size());
      ENGRAM_RETURN_IF_ERROR(b.device->copy_to_device(m.chunk(me, 1), bytes));
      ENGRAM_RETURN_IF_ERROR(b.device->copy_from_device(back, m.chunk(me, 1)));
      if (back != bytes) return internal_error("own plain memory reads back wrong");
      if (m.chunk_count(1 - me % 2) != 2) return internal_error("peer counts unknown");
      return m.teardown();
    });
    ASSERT_TRUE(run.is_ok());
    EXPECT_TRUE(run->all_ok()) << run->summary();
    EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
    EXPECT_GE(run->coverage.count("exchange: no handle type works, plain memory instead"), 1u);
  }
}

// A device that reports another granularity (a mixed-GPU group).
class GranularityOf final : public DeviceMemory {
 public:
  GranularityOf(DeviceMemory& real, uint64_t granularity_bytes) : real_(real), granularity_bytes_(granularity_bytes) {}
  Result<DeviceInfo> info() override {
    ENGRAM_ASSIGN_OR_RETURN(DeviceInfo info, real_.info());
    info.granularity_bytes = granularity_bytes_;
    return info;
  }
  Status probe_fabric() override { return real_.probe_fabric(); }
  Result<AllocationHandle> create(uint64_t bytes, HandleType t) override { return real_.create(bytes, t); }
  Result<ShareableHandle> export_handle(AllocationHandle a, HandleType t) override { return real_.export_handle(a, t); }
  Result<AllocationHandle> import_handle(const ShareableHandle& h) override { return real_.import_handle(h); }
  Result<DevicePtr> reserve(uint64_t bytes) override { return real_.reserve(bytes); }
  Status map(DevicePtr at, uint64_t bytes, AllocationHandle a) override { return real_.map(at, bytes, a); }
  Status set_access(DevicePtr at, uint64_t bytes) override { return real_.set_access(at, bytes); }
  Status unmap(DevicePtr at, uint64_t bytes) override { return real_.unmap(at, bytes); }
  Status release(AllocationHandle a) override { return real_.release(a); }
  Status free_reservation(DevicePtr at, uint64_t bytes) override { return real_.free_reservation(at, bytes); }
  Status close_fd(int fd) override { return real_.close_fd(fd); }
  Status copy_to_device(DevicePtr dst, std::span<const std::byte> src) override { return real_.copy_to_device(dst, src); }
  Status copy_from_device(std::span<std::byte> dst, DevicePtr src) override { return real_.copy_from_device(dst, src); }
  Status synchronize() override { return real_.synchronize(); }

 private:
  DeviceMemory& real_;
  uint64_t granularity_bytes_;
};

struct BadInput {
  const char* name;
  int culprit;  // world rank every error names
  std::function<Status(RankBackend&)> body;
  const char* says;
};

class ChunkExchangeBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(ChunkExchangeBadInput, EveryRankRefusesNamingTheRankAndNothingIsLeft) {
  const BadInput c = GetParam();
  auto run = sim::run_world(one_host(), c.body);
  ASSERT_TRUE(run.is_ok());
  for (int r = 0; r < 8; ++r) {
    const Status& s = run->statuses[static_cast<size_t>(r)];
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << r << ": " << s.to_string();
    EXPECT_EQ(s.context().rank, r) << s.to_string();
    EXPECT_EQ(s.context().peer, c.culprit) << s.to_string();
    EXPECT_EQ(s.context().step, "sizes") << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr(c.says));
  }
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

Status chunks_of(RankBackend& b, std::vector<uint64_t> chunks, ChunkExchangeOptions options = {}) {
  auto m = exchange_shareable_chunks(b, *b.world, chunks, options);
  return m.is_ok() ? m->teardown() : m.status();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ChunkExchangeBadInput,
    ::testing::Values(
        BadInput{"unequal_granularity", 4,
                 [](RankBackend& b) {
                   GranularityOf wide(*b.device, 4 * kMiB);
                   RankBackend mine = b;
                   if (b.world_rank == 4) mine.device = &wide;
                   return chunks_of(mine, {4 * kMiB});
                 },
                 "rank 4 maps at a granularity of 4194304 bytes, rank 0 at 2097152 bytes"},
        BadInput{"chunk_not_a_granularity_multiple", 3,
                 [](RankBackend& b) { return chunks_of(b, {2 * kMiB, b.world_rank == 3 ? 3 * kMiB : 2 * kMiB}); },
                 "rank 3's chunk 1 is 3145728 bytes, not a positive multiple of the 2097152-byte granularity"},
        BadInput{"chunk_list_longer_than_the_span", 5,
                 [](RankBackend& b) {
                   ChunkExchangeOptions options;
                   options.span_bytes_per_peer = 4 * kMiB;
                   return chunks_of(b, std::vector<uint64_t>(b.world_rank == 5 ? 3 : 2, 2 * kMiB), options);
                 },
                 "rank 5's 3 chunks need 6291456 bytes, more than the span of 4194304 bytes reserved per peer"},
        BadInput{"no_chunks", 6,
                 [](RankBackend& b) {
                   return chunks_of(b, b.world_rank == 6 ? std::vector<uint64_t>{} : std::vector<uint64_t>{2 * kMiB});
                 },
                 "rank 6 shares no chunks"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ChunkExchange, ACountOtherThanThePeerAnnouncedIsRefusedOnEveryRankNothingLeft) {
  // Rank 0 expects two chunks from every rank; rank 6 announces three.
  auto run = sim::run_world(one_host(), [](RankBackend& b) {
    ChunkExchangeOptions options;
    if (b.world_rank == 0) options.expected_chunk_counts.assign(8, 2);
    return chunks_of(b, std::vector<uint64_t>(b.world_rank == 6 ? 3 : 2, 2 * kMiB), options);
  });
  ASSERT_TRUE(run.is_ok());
  const Status& mine = run->statuses[0];
  EXPECT_EQ(mine.code(), ErrorCode::kInvalidArgument) << mine.to_string();
  EXPECT_EQ(mine.context().peer, 6);
  EXPECT_EQ(mine.context().step, "chunks");
  EXPECT_THAT(mine.message(), HasSubstr("rank 6 announced 3 chunks; rank 0 expects 2 from it"));
  for (int r = 1; r < 8; ++r) {
    const Status& s = run->statuses[static_cast<size_t>(r)];
    EXPECT_EQ(s.code(), ErrorCode::kUnavailable) << s.to_string();
    EXPECT_EQ(s.context().peer, 0) << s.to_string();
    EXPECT_EQ(s.context().step, "chunks") << s.to_string();
  }
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

TEST(ChunkExchange, AnImportFailureAmongManyChunksUndoesEveryChunk) {
  for (bool fabric : {false, true}) {
    WorldSpec spec = fabric ? two_gb300_hosts_one_domain() : one_host();
    spec.faults.plan(FaultSite::kImport, 4, /*occurrence=*/7);  // mid-way through the second peer's three chunks
    auto run = sim::run_world(spec, [](RankBackend& b) {
      return chunks_of(b, std::vector<uint64_t>(static_cast<size_t>(1 + b.world_rank % 3), 2 * kMiB));
    });
    ASSERT_TRUE(run.is_ok());
    EXPECT_EQ(run->faults.fired(FaultSite::kImport), 1u);
    EXPECT_EQ(run->statuses[4].context().step, "import") << run->statuses[4].to_string();
    EXPECT_GE(run->statuses[4].context().peer, 0);
    EXPECT_EQ(run->failed_rank_count(), 8) << run->summary();
    EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
  }
}

TEST(ChunkExchange, RandomFaultsWithUnequalChunkListsNeverLeakOrHang) {
  int runs_with_failures = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const WorldSpec spec = testing::random_exchange_faults(seed, 0.005, 0.001);
    auto run = sim::run_world(spec, [&](RankBackend& b) {
      return chunks_of(b, std::vector<uint64_t>(static_cast<size_t>(1 + (b.world_rank + seed) % 4), 2 * kMiB));
    });
    ASSERT_TRUE(run.is_ok());
    runs_with_failures += run->all_ok() ? 0 : 1;
    EXPECT_TRUE(run->leaks.empty()) << run->summary();
    if (!run->all_ok()) {
      EXPECT_EQ(run->failed_rank_count(), 8) << run->summary();
    }
  }
  EXPECT_GT(runs_with_failures, 0);
}

}  // namespace
}  // namespace engram
