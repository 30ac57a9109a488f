// The emulator's sparse bf16 reduce-scatter (only written runs travel) must
// be bitwise the dense one on the input the runs describe: ring order, -0,
// NaN, explicit zeros and absent members, for group sizes 1 to 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/base/bf16.h"
#include "sim/sim_collectives.h"

namespace engram::sim {
namespace {

// A value a lookup row can hold, edge cases over-represented.
uint16_t draw_value(std::mt19937_64& rng) {
  switch (rng() % 8) {
    case 0: return 0x0000;
    case 1: return 0x8000;  // -0
    case 2: return kBf16CanonicalNan;
    case 3: return static_cast<uint16_t>(0xffc1);  // a negative NaN with a payload
    case 4: return static_cast<uint16_t>(0x7f80);  // +inf
    default: return float_to_bf16(std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000), -7));
  }
}

// Every member's dense input and its runs: a few runs per member, anywhere
// (across chunk bounds too), the rest absent.
struct MemberInput {
  std::vector<uint16_t> dense;
  std::vector<std::pair<uint64_t, std::vector<uint16_t>>> runs;
};

std::vector<MemberInput> draw_inputs(int members, uint64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<MemberInput> inputs(static_cast<size_t>(members));
  const uint64_t total = count * static_cast<uint64_t>(members);
  for (auto& in : inputs) {
    in.dense.assign(total, 0);
    uint64_t at = rng() % 3;
    while (at < total) {
      const uint64_t length = std::min<uint64_t>(1 + rng() % (count + 2), total - at);
      std::vector<uint16_t> values(length);
      for (auto& v : values) v = draw_value(rng);
      std::copy(values.begin(), values.end(), in.dense.begin() + static_cast<std::ptrdiff_t>(at));
      in.runs.emplace_back(at, std::move(values));
      at += length + rng() % (count + 3);  // a gap: absent elements
    }
  }
  return inputs;
}

TEST(SparseReduceScatter, EqualsTheDenseSumBitwiseForEveryGroupSize) {
  for (int members = 1; members <= 8; ++members) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      const uint64_t count = 1 + seed % 7;
      const std::vector<MemberInput> inputs = draw_inputs(members, count, seed * 1000 + members);
      std::vector<std::span<const uint16_t>> dense;
      for (const auto& in : inputs) dense.emplace_back(in.dense);
      auto run = run_ranks(members, seed, [&](int rank, Collectives& world) -> Status {
        auto* sparse = dynamic_cast<SparseReduceScatter*>(&world);
        if (sparse == nullptr) return internal_error("the emulator's collectives take sparse input");
        std::vector<Bf16Run> runs;
        for (const auto& [first, values] : inputs[static_cast<size_t>(rank)].runs) runs.push_back({first, values});
        std::vector<uint16_t> got(count), want(count);
        ENGRAM_RETURN_IF_ERROR(sparse->reduce_scatter_sum_bf16_runs(count, runs, got));
        reduce_scatter_sum_bf16_reference(dense, rank, want);
        for (uint64_t e = 0; e < count; ++e)
          if (got[e] != want[e])
            return internal_error(fmt::format("{} members, seed {}, rank {}, element {}: sparse {:#06x}, dense {:#06x}",
                                              members, seed, rank, e, got[e], want[e]));
        return Status::ok();
      });
      for (const auto& s : run.statuses) ASSERT_TRUE(s.is_ok()) << s.to_string();
    }
  }
}

// The byte-wise max (DeviceCollectives::reduce_scatter_max_bytes, NCCL's
// max over uint8) of the same runs: each byte the largest any member gave,
// absent bytes 0. Where one member holds an element (the collective lookup's
// rows), that member's bits, -0 included.
TEST(SparseReduceScatter, MaxBytesIsTheDenseByteWiseMaxForEveryGroupSize) {
  for (int members = 1; members <= 8; ++members) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      const uint64_t count = 1 + seed % 7;
      const std::vector<MemberInput> inputs = draw_inputs(members, count, seed * 1000 + members);
      auto run = run_ranks(members, seed, [&](int rank, Collectives& world) -> Status {
        auto* sparse = dynamic_cast<SparseReduceScatter*>(&world);
        if (sparse == nullptr) return internal_error("the emulator's collectives take sparse input");
        std::vector<Bf16Run> runs;
        for (const auto& [first, values] : inputs[static_cast<size_t>(rank)].runs) runs.push_back({first, values});
        std::vector<uint16_t> got(count);
        ENGRAM_RETURN_IF_ERROR(sparse->reduce_scatter_max_bytes_runs(count, runs, got));
        for (uint64_t e = 0; e < count; ++e) {
          unsigned low = 0, high = 0;
          for (const auto& in : inputs) {
            const uint16_t v = in.dense[static_cast<size_t>(rank) * count + e];
            low = std::max(low, v & 0xffu);
            high = std::max(high, v & 0xff00u);
          }
          if (got[e] != (low | high))
            return internal_error(fmt::format("{} members, seed {}, rank {}, element {}: sparse {:#06x}, dense {:#06x}",
                                              members, seed, rank, e, got[e], low | high));
        }
        return Status::ok();
      });
      for (const auto& s : run.statuses) ASSERT_TRUE(s.is_ok()) << s.to_string();
    }
  }
}

TEST(SparseReduceScatter, ARunPastTheInputIsAnInvalidArgumentOnThatRank) {
  auto run = run_ranks(2, 3, [](int, Collectives& world) -> Status {
    auto* sparse = dynamic_cast<SparseReduceScatter*>(&world);
    std::vector<uint16_t> values(3, 0x3f80);
    const Bf16Run runs[] = {{3, values}};  // [3, 6) of a 2 x 2 input
    std::vector<uint16_t> out(2);
    return sparse->reduce_scatter_sum_bf16_runs(2, runs, out);
  });
  for (const auto& s : run.statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("reaches past"), std::string::npos) << s.to_string();
  }
}

TEST(SparseReduceScatter, OverlappingRunsAreAnInvalidArgumentNamingBoth) {
  auto run = run_ranks(2, 4, [](int, Collectives& world) -> Status {
    auto* sparse = dynamic_cast<SparseReduceScatter*>(&world);
    std::vector<uint16_t> values(2, 0x3f80);
    const Bf16Run runs[] = {{1, values}, {0, values}};  // [1, 3) and [0, 2)
    std::vector<uint16_t> out(2);
    return sparse->reduce_scatter_sum_bf16_runs(2, runs, out);
  });
  for (const auto& s : run.statuses) {
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("[0, 2) and [1, 3) overlap"), std::string::npos) << s.to_string();
  }
}

TEST(SparseReduceScatter, MembersThatDisagreeOnTheCountFail) {
  auto run = run_ranks(2, 5, [](int rank, Collectives& world) -> Status {
    auto* sparse = dynamic_cast<SparseReduceScatter*>(&world);
    const uint64_t count = rank == 0 ? 2 : 3;
    std::vector<uint16_t> out(count);
    return sparse->reduce_scatter_sum_bf16_runs(count, {}, out);
  });
  for (const auto& s : run.statuses) EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
}

}  // namespace
}  // namespace engram::sim
