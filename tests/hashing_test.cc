#include "core/model/hashing.h"

#include <gtest/gtest.h>

#include <limits>

#include "core/base/splitmix64.h"

namespace engram {
namespace {

// vocab 10 (pad id 9), orders {2, 3}, 2 heads each: primes 11, 13 (order 2)
// and 17, 19 (order 3 restarts at 9 and skips 11, 13); offsets 0, 11, 24, 41.
ModelSpec hand_spec() {
  auto spec = make_model_spec("hand", 10, {3}, {2, 3}, 2, RowFormat::kBf16, 2, 1);
  EXPECT_TRUE(spec.is_ok());
  return *spec;
}

TEST(Hashing, HandComputedIdsWithExplicitMultipliers) {
  const ModelSpec spec = hand_spec();
  ASSERT_EQ(spec.tables[0].primes, (std::vector<int64_t>{11, 13, 17, 19}));
  auto hasher = TableHasher::with_multipliers(spec, 0, {3, 5, 7});
  ASSERT_TRUE(hasher.is_ok()) << hasher.status().to_string();
  const std::vector<int64_t> tokens = {4, 2, kDeadId, 6};
  std::vector<int64_t> ids(tokens.size() * 4);
  ASSERT_TRUE(hasher->hash(tokens, {}, ids).is_ok());
  const std::vector<int64_t> expected = {
      // t0: window [4, pad, pad]; mix2 = 4*3 ^ 9*5 = 12 ^ 45 = 33; mix3 = 33 ^ 9*7 = 33 ^ 63 = 30.
      // 33 % 11 + 0, 33 % 13 + 11, 30 % 17 + 24, 30 % 19 + 41
      0, 18, 37, 52,
      // t1: window [2, 4, pad]; mix2 = 6 ^ 20 = 18; mix3 = 18 ^ 63 = 45.
      7, 16, 35, 48,
      // t2: DEAD reads nothing.
      kDeadId, kDeadId, kDeadId, kDeadId,
      // t3: window [6, pad, pad]: lookback stops at the DEAD; mix2 = 18 ^ 45 = 63; mix3 = 63 ^ 63 = 0.
      8, 22, 24, 41};
  EXPECT_EQ(ids, expected);
}

TEST(Hashing, SequenceStartsCutTheLookback) {
  const ModelSpec spec = hand_spec();
  auto hasher = TableHasher::with_multipliers(spec, 0, {3, 5, 7});
  ASSERT_TRUE(hasher.is_ok());
  const std::vector<int64_t> tokens = {4, 2, 5, 1};
  const std::vector<uint8_t> starts = {1, 0, 1, 0};
  std::vector<int64_t> ids(16);
  ASSERT_TRUE(hasher->hash(tokens, starts, ids).is_ok());
  // Token 2 starts a sequence: window [5, pad, pad], then [1, 5, pad].
  EXPECT_EQ(std::vector<int64_t>(ids.begin() + 8, ids.end()), (std::vector<int64_t>{1, 19, 36, 51, 4, 11, 27, 59}));
  // The same as hashing the second sequence on its own.
  std::vector<int64_t> alone(8);
  ASSERT_TRUE(hasher->hash(std::vector<int64_t>{5, 1}, {}, alone).is_ok());
  EXPECT_EQ(std::vector<int64_t>(ids.begin() + 8, ids.end()), alone);
}

TEST(Hashing, MultipliersAreOddPositiveBoundedAndSeeded) {
  auto v41 = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(v41.is_ok());
  const int64_t bound = hash_multiplier_bound(v41->vocab_size);
  for (int table = 0; table < 2; ++table) {
    auto m = hash_multipliers(*v41, table);
    ASSERT_EQ(static_cast<int>(m.size()), 4);
    for (int64_t value : m) {
      EXPECT_GT(value, 0);
      EXPECT_EQ(value & 1, 1);
      EXPECT_LT(value, bound);
      // The largest product stays in int64.
      EXPECT_LE(static_cast<__int128>(v41->vocab_size - 1) * value, std::numeric_limits<int64_t>::max());
    }
  }
  EXPECT_NE(hash_multipliers(*v41, 0), hash_multipliers(*v41, 1));  // seeded by layer id
  // Drawn from splitmix64(seed + layer id): the first multiplier, recomputed.
  uint64_t state = v41->seed + static_cast<uint64_t>(v41->tables[0].layer_id);
  EXPECT_EQ(hash_multipliers(*v41, 0)[0], static_cast<int64_t>((splitmix64_next(state) % static_cast<uint64_t>(bound / 2)) * 2 + 1));
}

TEST(Hashing, SplitmixMatchesPublishedSequence) {
  // splitmix64 from state 0: the reference values (Vigna's splitmix64.c).
  uint64_t state = 0;
  EXPECT_EQ(splitmix64_next(state), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitmix64_next(state), 0x6e789e6aa1b965f4ull);
}

TEST(Hashing, EveryIdStaysInItsHeadsBucketForV41) {
  auto v41 = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(v41.is_ok());
  uint64_t state = 42;
  std::vector<int64_t> tokens(3000);
  std::vector<uint8_t> starts(tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    const uint64_t draw = splitmix64_next(state);
    tokens[t] = draw % 97 == 0 ? kDeadId : static_cast<int64_t>(draw % static_cast<uint64_t>(v41->vocab_size));
    if (draw % 89 == 0) tokens[t] = v41->vocab_size - 1;  // the pad id is a token too
    starts[t] = draw % 211 == 0;
  }
  for (int table = 0; table < 2; ++table) {
    auto hasher = TableHasher::create(*v41, table);
    ASSERT_TRUE(hasher.is_ok());
    ASSERT_EQ(hasher->head_count(), 24);
    std::vector<int64_t> ids(tokens.size() * 24);
    ASSERT_TRUE(hasher->hash(tokens, starts, ids).is_ok());
    const TableSpec& spec = v41->tables[static_cast<size_t>(table)];
    for (size_t t = 0; t < tokens.size(); ++t)
      for (int h = 0; h < 24; ++h) {
        const int64_t id = ids[t * 24 + static_cast<size_t>(h)];
        if (tokens[t] == kDeadId) {
          EXPECT_EQ(id, kDeadId);
          continue;
        }
        EXPECT_GE(id, spec.head_offset(h));
        EXPECT_LT(id, spec.head_offset(h) + spec.primes[static_cast<size_t>(h)]);
      }
    // Deterministic: a second run gives the same ids.
    std::vector<int64_t> again(ids.size());
    ASSERT_TRUE(hasher->hash(tokens, starts, again).is_ok());
    EXPECT_EQ(ids, again);
  }
}

TEST(Hashing, RejectsBadInputsNamingThem) {
  const ModelSpec spec = hand_spec();
  auto even = TableHasher::with_multipliers(spec, 0, {3, 4, 7});
  ASSERT_FALSE(even.is_ok());
  EXPECT_NE(even.status().message().find("m[1] = 4"), std::string::npos);
  auto too_big = TableHasher::with_multipliers(spec, 0, {3, 5, hash_multiplier_bound(10) | 1});
  EXPECT_FALSE(too_big.is_ok());
  auto few = TableHasher::with_multipliers(spec, 0, {3, 5});
  EXPECT_FALSE(few.is_ok());

  auto hasher = TableHasher::with_multipliers(spec, 0, {3, 5, 7});
  ASSERT_TRUE(hasher.is_ok());
  std::vector<int64_t> ids(8);
  Status s = hasher->hash(std::vector<int64_t>{1, 10}, {}, ids);
  ASSERT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 1 has id 10"), std::string::npos) << s.message();
  EXPECT_EQ(hasher->hash(std::vector<int64_t>{1, -2}, {}, ids).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(hasher->hash(std::vector<int64_t>{1, 2}, {}, std::span(ids).first(7)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(hasher->hash(std::vector<int64_t>{1, 2}, std::vector<uint8_t>{1}, ids).code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace engram
