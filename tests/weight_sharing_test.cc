// The weight-sharing transport on the emulator: each rank shares named
// tensors of unequal sizes and reads every peer's (one handle per tensor,
// page-aligned ranges); the second consumer of the list-form exchange.
#include "core/exchange/weight_sharing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/base/units.h"
#include "sim/world.h"

namespace engram {
namespace {

using sim::WorldSpec;
using ::testing::HasSubstr;

HostSpec host(std::string name, int gpus) {
  HostSpec h;
  h.name = std::move(name);
  h.gpu_count = gpus;
  h.gpu_model = "GB300";
  h.tmpfs_bytes_total = 64 * kMiB;
  return h;
}

WorldSpec posix_host() {
  WorldSpec spec;
  spec.hosts.push_back(host("b300-0", 4));
  return spec;
}

WorldSpec fabric_domain() {
  WorldSpec spec;
  for (int i = 0; i < 2; ++i) {
    HostSpec h = host("gb300-" + std::to_string(i), 2);
    h.nvlink_domain = "nvl72-a";
    h.imex_channel = true;
    h.fabric_attribute = true;
    spec.hosts.push_back(h);
  }
  return spec;
}

// Rank r shares 1 + r % 3 tensors (layer, weight), none a granularity multiple.
std::vector<TensorSpec> tensors_of_rank(int r) {
  std::vector<TensorSpec> out;
  for (int l = 0; l < 1 + r % 3; ++l)
    out.push_back({fmt::format("layer{}.w{}", l, r % 2 ? "_up" : "_gate"), static_cast<uint64_t>(r + 1) * 100'000 + l * 4096});
  return out;
}

std::byte pattern(int rank, size_t tensor, size_t i) { return static_cast<std::byte>((rank * 31 + tensor * 7 + i) & 0xFF); }

Status share_and_read_every_peer(RankBackend& b, std::vector<HandleType>& types) {
  const std::vector<TensorSpec> mine = tensors_of_rank(b.world_rank);
  ENGRAM_ASSIGN_OR_RETURN(WeightSharing w, WeightSharing::create(b, *b.world, mine));
  types[static_cast<size_t>(b.world_rank)] = w.handle_type();
  for (size_t t = 0; t < mine.size(); ++t) {
    std::vector<std::byte> bytes(mine[t].bytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern(b.world_rank, t, i);
    ENGRAM_RETURN_IF_ERROR(w.write(mine[t].name, bytes));
  }
  ENGRAM_RETURN_IF_ERROR(b.world->barrier());
  for (int p = 0; p < w.group_size(); ++p) {
    const std::vector<TensorSpec> theirs = tensors_of_rank(p);  // group rank == world rank here
    if (w.tensors_of(p).size() != theirs.size()) return internal_error("a peer's tensor list differs");
    for (size_t t = 0; t < theirs.size(); ++t) {
      ENGRAM_ASSIGN_OR_RETURN(DevicePtr at, w.address(p, theirs[t].name));
      if (at % (2 * kMiB) != 0) return internal_error("a peer's tensor is not page-aligned");
      std::vector<std::byte> got(theirs[t].bytes);
      ENGRAM_RETURN_IF_ERROR(w.read(p, theirs[t].name, got));
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != pattern(p, t, i)) return internal_error(fmt::format("rank {} tensor {} differs", p, t));
    }
  }
  Status missing = w.address(1, "no.such.tensor").status();
  if (missing.code() != ErrorCode::kNotFound || missing.context().peer != 1)
    return internal_error("unknown tensor not refused: " + missing.to_string());
  std::vector<std::byte> too_long(mine[0].bytes + 1);
  if (w.write(mine[0].name, too_long).code() != ErrorCode::kInvalidArgument)
    return internal_error("oversized write not refused");
  return w.teardown();
}

TEST(WeightSharing, RanksShareNamedTensorsOfUnequalSizesAndReadEveryPeers) {
  for (bool fabric : {false, true}) {
    std::vector<HandleType> types(4, HandleType::kNone);
    auto run = sim::run_world(fabric ? fabric_domain() : posix_host(),
                              [&](RankBackend& b) { return share_and_read_every_peer(b, types); });
    ASSERT_TRUE(run.is_ok());
    EXPECT_TRUE(run->all_ok()) << run->summary();
    EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
    for (HandleType t : types) EXPECT_EQ(t, fabric ? HandleType::kFabric : HandleType::kPosixFd);
  }
}

TEST(WeightSharing, WithoutAHandleTypeEachRankKeepsItsOwnTensorsInPlainMemory) {
  WorldSpec spec = posix_host();
  spec.hosts[0].posix_fd_attribute = false;
  auto run = sim::run_world(spec, [](RankBackend& b) -> Status {
    const std::vector<TensorSpec> mine = tensors_of_rank(b.world_rank);
    ENGRAM_ASSIGN_OR_RETURN(WeightSharing w, WeightSharing::create(b, *b.world, mine, {.allow_unshared = true}));
    if (w.shared()) return internal_error("claims to share");
    std::vector<std::byte> bytes(mine[0].bytes, std::byte{0x5a}), back(mine[0].bytes);
    ENGRAM_RETURN_IF_ERROR(w.write(mine[0].name, bytes));
    ENGRAM_RETURN_IF_ERROR(w.read(w.group_rank(), mine[0].name, back));
    if (back != bytes) return internal_error("own tensor reads back wrong");
    const int peer = (w.group_rank() + 1) % w.group_size();
    Status peers = w.read(peer, tensors_of_rank(peer)[0].name, back);
    if (peers.code() != ErrorCode::kFailedPrecondition ||
        peers.message().find("POSIX fd handles are not supported") == std::string::npos)
      return internal_error("a peer's tensor read without sharing: " + peers.to_string());
    return w.teardown();
  });
  ASSERT_TRUE(run.is_ok());
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

TEST(WeightSharing, ARepeatedNameIsRefusedOnEveryRankNamingTheRank) {
  auto run = sim::run_world(posix_host(), [](RankBackend& b) -> Status {
    std::vector<TensorSpec> mine = tensors_of_rank(b.world_rank);
    if (b.world_rank == 2) mine.push_back(mine[0]);
    return WeightSharing::create(b, *b.world, mine).status();
  });
  ASSERT_TRUE(run.is_ok());
  for (const Status& s : run->statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_EQ(s.context().peer, 2);
    EXPECT_EQ(s.context().step, "tensor_lists");
    EXPECT_THAT(s.message(), HasSubstr("rank 2 lists tensor 'layer0.w_gate' twice"));
  }
  EXPECT_TRUE(run->leaks.empty()) << sim::Ledger::format(run->leaks);
}

}  // namespace
}  // namespace engram
