// Gathering facts (core/exchange/gather_facts.h) on the emulator: ranks
// handed one shared buffer decode it once and share the facts, which are
// kept with the buffer, not in the process: they are freed when the world's
// ranks let them go, and two worlds never meet. Ranks that gather into
// buffers of their own (as a real rank does) share nothing.
#include "core/exchange/gather_facts.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/sim_collectives.h"

namespace engram {
namespace {

PlacementFacts facts_of(int rank, size_t hostname_chars = 0) {
  PlacementFacts p;
  p.host.hostname = hostname_chars == 0 ? fmt::format("host-{}", rank / 2) : std::string(hostname_chars, 'h');
  p.host.boot_id = fmt::format("boot-{}", rank / 2);
  p.gpu_ordinal = rank % 2;
  p.visible_gpu_count = 2;
  return p;
}

// Every rank's gathered facts, as each rank received them.
struct Gathered {
  std::vector<const GatheredFacts*> identity;           // per rank
  std::vector<std::weak_ptr<const GatheredFacts>> kept;  // per rank
  std::vector<std::shared_ptr<const GatheredFacts>> held;  // per rank, when asked to hold them
};

// A real rank's collectives, in the emulator: every call passes through,
// but all_gather_shared is Collectives' own, a buffer per call.
class OwnBuffers final : public Collectives {
 public:
  explicit OwnBuffers(Collectives& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int world_rank() const override { return inner_.world_rank(); }
  Status all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    return inner_.all_gather(mine, all);
  }
  Status reduce_scatter_sum_bf16(std::span<const uint16_t> input, std::span<uint16_t> output) override {
    return inner_.reduce_scatter_sum_bf16(input, output);
  }
  Status all_to_all(std::span<const std::byte> send, std::span<std::byte> receive) override {
    return inner_.all_to_all(send, receive);
  }
  Status barrier() override { return inner_.barrier(); }
  Result<std::unique_ptr<Collectives>> split(int color, int key) override { return inner_.split(color, key); }

 private:
  Collectives& inner_;
};

Gathered gather_on(int ranks, uint64_t seed, bool own_buffers, bool hold, size_t hostname_chars = 0) {
  Gathered out;
  out.identity.resize(static_cast<size_t>(ranks));
  out.kept.resize(static_cast<size_t>(ranks));
  out.held.resize(static_cast<size_t>(ranks));
  auto run = sim::run_ranks(ranks, seed, [&](int rank, Collectives& world) -> Status {
    OwnBuffers own(world);
    const uint32_t extra = 1000u + static_cast<uint32_t>(rank);
    ENGRAM_ASSIGN_OR_RETURN(std::shared_ptr<const GatheredFacts> facts,
                            gather_facts(own_buffers ? own : world, facts_of(rank, hostname_chars), extra));
    EXPECT_EQ(facts->took_second_round, hostname_chars > kFactsRecordBytes);
    EXPECT_EQ(facts->ranks.size(), static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      const RankFacts& f = facts->ranks[static_cast<size_t>(r)];
      EXPECT_EQ(f.extra_as<uint32_t>(), 1000u + static_cast<uint32_t>(r));
      EXPECT_EQ(f.placement.host.hostname, facts_of(r, hostname_chars).host.hostname);
      EXPECT_EQ(f.placement.gpu_ordinal, r % 2);
    }
    out.identity[static_cast<size_t>(rank)] = facts.get();
    out.kept[static_cast<size_t>(rank)] = facts;
    if (hold) out.held[static_cast<size_t>(rank)] = facts;
    return Status::ok();
  });
  for (const Status& s : run.statuses) EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

TEST(GatherFacts, RanksHandedOneBufferDecodeItOnceAndTheWorldFreesIt) {
  for (size_t hostname_chars : {size_t{0}, kFactsRecordBytes + 40}) {  // one round, then two
    const Gathered g = gather_on(6, 3, /*own_buffers=*/false, /*hold=*/false, hostname_chars);
    for (size_t r = 0; r < g.identity.size(); ++r) {
      EXPECT_EQ(g.identity[r], g.identity[0]) << "rank " << r << ", hostname " << hostname_chars;
      // Nothing outside the world keeps the facts once its ranks are done.
      EXPECT_TRUE(g.kept[r].expired()) << "rank " << r << ", hostname " << hostname_chars;
    }
  }
}

TEST(GatherFacts, TwoWorldsShareNothing) {
  const Gathered first = gather_on(4, 5, false, /*hold=*/true);
  const Gathered second = gather_on(4, 5, false, /*hold=*/true);  // the same facts, another world
  EXPECT_NE(first.identity[0], second.identity[0]);
  EXPECT_EQ(first.held[0]->ranks.size(), second.held[0]->ranks.size());
}

TEST(GatherFacts, RanksWithBuffersOfTheirOwnShareNothing) {
  const Gathered g = gather_on(4, 7, /*own_buffers=*/true, /*hold=*/true);
  for (size_t r = 1; r < g.identity.size(); ++r)
    for (size_t q = 0; q < r; ++q) EXPECT_NE(g.identity[r], g.identity[q]) << "ranks " << q << " and " << r;
}

}  // namespace
}  // namespace engram
