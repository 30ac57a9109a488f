#include "core/model/hashing.h"

#include <climits>
#include <cstdint>
#include <gtest/gtest.h>

#include <limits>

#include "core/base/splitmix64.h"
#include "core/model/numpy_random.h"

namespace engram {
namespace {

// Table size 10, compressed vocabulary 10, pad id 9; orders {2, 3}, 2 heads
// each: primes 11, 13 (order 2) and 17, 19 (order 3 restarts at 9 and skips
// 11, 13); offsets 0, 11, 24, 41.
ModelSpec hand_spec(DeadTokenRule rule) {
  auto spec = make_model_spec("hand", 10, {3}, {2, 3}, 2, RowFormat::kBf16, 2, 1);
  EXPECT_TRUE(spec.is_ok());
  spec->pad_id = 9;
  spec->dead_token_rule = rule;
  EXPECT_TRUE(validate(*spec).is_ok());
  return *spec;
}

std::vector<int64_t> hand_ids(DeadTokenRule rule, const std::vector<int64_t>& tokens) {
  auto hasher = TableHasher::with_multipliers(hand_spec(rule), 0, {3, 5, 7});
  EXPECT_TRUE(hasher.is_ok()) << hasher.status().to_string();
  std::vector<int64_t> ids(tokens.size() * 4);
  EXPECT_TRUE(hasher->hash(tokens, {}, ids).is_ok());
  return ids;
}

TEST(Hashing, HandComputedIdsUnderEachDeadTokenRule) {
  ASSERT_EQ(hand_spec(DeadTokenRule::kBarrier).tables[0].primes, (std::vector<int64_t>{11, 13, 17, 19}));
  const std::vector<int64_t> tokens = {4, 2, kDeadId, 6};
  // t0: window [4, pad, pad]; mix2 = 4*3 ^ 9*5 = 12 ^ 45 = 33; mix3 = 33 ^ 9*7 = 33 ^ 63 = 30.
  //     33 % 11 + 0, 33 % 13 + 11, 30 % 17 + 24, 30 % 19 + 41
  // t1: window [2, 4, pad]; mix2 = 6 ^ 20 = 18; mix3 = 18 ^ 63 = 45.
  // t3: window [6, pad, pad]: the lookback stops at the DEAD; mix2 = 18 ^ 45 = 63; mix3 = 63 ^ 63 = 0.
  const std::vector<int64_t> t0 = {0, 18, 37, 52}, t1 = {7, 16, 35, 48}, t3 = {8, 22, 24, 41};
  auto join = [](std::vector<std::vector<int64_t>> parts) {
    std::vector<int64_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  // Barrier: the DEAD token is the all-pad n-gram: mix2 = 27 ^ 45 = 54; mix3 = 54 ^ 63 = 9.
  EXPECT_EQ(hand_ids(DeadTokenRule::kBarrier, tokens), join({t0, t1, {10, 13, 33, 50}, t3}));
  // Barrier, no row: the DEAD token reads nothing.
  EXPECT_EQ(hand_ids(DeadTokenRule::kBarrierNoRow, tokens), join({t0, t1, {-1, -1, -1, -1}, t3}));
  // Literal: -1 is a value. t2: window [-1, 2, 4]: mix2 = -3 ^ 10 = -9, mix3 = -9 ^ 28 = -21, and
  // numpy's modulo: -9 mod 11 = 2, -9 mod 13 = 4, -21 mod 17 = 13, -21 mod 19 = 17.
  // t3: window [6, -1, 2]: mix2 = 18 ^ -5 = -23, mix3 = -23 ^ 14 = -25.
  EXPECT_EQ(hand_ids(DeadTokenRule::kLiteral, tokens), join({t0, t1, {2, 15, 37, 58}, {10, 14, 33, 54}}));
}

TEST(Hashing, SequenceStartsCutTheLookback) {
  auto hasher = TableHasher::with_multipliers(hand_spec(DeadTokenRule::kBarrier), 0, {3, 5, 7});
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

TEST(Hashing, V41MultipliersAreNumpysDraws) {
  auto v41 = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(v41.is_ok());
  EXPECT_EQ(v41->compressed_vocab_size, 99'092);
  EXPECT_EQ(v41->pad_id, 2);
  EXPECT_EQ(v41->seed, 0u);
  EXPECT_EQ(v41->dead_token_rule, DeadTokenRule::kBarrier);
  // np.random.default_rng(10007 * layer_id).integers(0, (INT64_MAX // 99092) // 2, size=4,
  // dtype=np.int64) * 2 + 1 for layers 1 and 14, from numpy 1.24.2 (they are also the values
  // third-party V4.1 ports pin).
  EXPECT_EQ(hash_multipliers(*v41, 0),
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(hash_multipliers(*v41, 1),
            (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
  const int64_t half_bound = hash_multiplier_half_bound(v41->compressed_vocab_size);
  EXPECT_EQ(half_bound, 46'539'438'283'891);  // (INT64_MAX // 99092) // 2
  for (int table = 0; table < 2; ++table)
    for (int64_t m : hash_multipliers(*v41, table)) {
      EXPECT_EQ(m & 1, 1);
      EXPECT_LT(m, 2 * half_bound);
      EXPECT_LE(static_cast<__int128>(v41->compressed_vocab_size - 1) * m, std::numeric_limits<int64_t>::max());
    }
  // A huge vocabulary leaves one value to draw: every multiplier is 1.
  ModelSpec wide = *v41;
  wide.compressed_vocab_size = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(hash_multiplier_half_bound(wide.compressed_vocab_size), 1);
  EXPECT_EQ(hash_multipliers(wide, 0), (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(Hashing, NumpyGeneratorPiecesMatchPinnedValues) {
  // From numpy 1.24.2: SeedSequence(0).generate_state(4), PCG64(0)'s state and
  // increment, default_rng(0).integers(0, 2**40, size=3, dtype=np.int64).
  EXPECT_EQ(numpy_random::seed_sequence_words(0, 4),
            (std::vector<uint32_t>{2968811710u, 3677149159u, 745650761u, 2884920346u}));
  numpy_random::Pcg64 g(0);
  const numpy_random::uint128 ten19 = 10'000'000'000'000'000'000ull;
  // 35399562948360463058890781895381311971 and 87136372517582989555478159403783844777.
  EXPECT_TRUE(g.state() == static_cast<numpy_random::uint128>(3539956294836046305ull) * ten19 +
                               static_cast<numpy_random::uint128>(8890781895381311971ull));
  EXPECT_TRUE(g.increment() == static_cast<numpy_random::uint128>(8713637251758298955ull) * ten19 +
                                   static_cast<numpy_random::uint128>(5478159403783844777ull));
  EXPECT_EQ(numpy_random::bounded_int64(g, 0, int64_t{1} << 40, 3, numpy_random::BoundedMethod::kLemire),
            (std::vector<int64_t>{700346781657, 296633628802, 45050865998}));
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
    tokens[t] = draw % 97 == 0 ? kDeadId : static_cast<int64_t>(draw % static_cast<uint64_t>(v41->compressed_vocab_size));
    if (draw % 89 == 0) tokens[t] = v41->pad_id;  // the pad id is a token too
    starts[t] = draw % 211 == 0;
  }
  for (DeadTokenRule rule : {DeadTokenRule::kBarrier, DeadTokenRule::kBarrierNoRow, DeadTokenRule::kLiteral}) {
    ModelSpec spec = *v41;
    spec.dead_token_rule = rule;
    for (int table = 0; table < 2; ++table) {
      auto hasher = TableHasher::create(spec, table);
      ASSERT_TRUE(hasher.is_ok());
      ASSERT_EQ(hasher->head_count(), 24);
      std::vector<int64_t> ids(tokens.size() * 24);
      ASSERT_TRUE(hasher->hash(tokens, starts, ids).is_ok());
      const TableSpec& t_spec = spec.tables[static_cast<size_t>(table)];
      for (size_t t = 0; t < tokens.size(); ++t)
        for (int h = 0; h < 24; ++h) {
          const int64_t id = ids[t * 24 + static_cast<size_t>(h)];
          if (tokens[t] == kDeadId && rule == DeadTokenRule::kBarrierNoRow) {
            EXPECT_EQ(id, kDeadId);
            continue;
          }
          EXPECT_GE(id, t_spec.head_offset(h));
          EXPECT_LT(id, t_spec.head_offset(h) + t_spec.primes[static_cast<size_t>(h)]);
        }
      // Deterministic: a second run gives the same ids.
      std::vector<int64_t> again(ids.size());
      ASSERT_TRUE(hasher->hash(tokens, starts, again).is_ok());
      EXPECT_EQ(ids, again);
    }
  }
}

TEST(Hashing, BarrierDeadTokensHashAsTheAllPadNgram) {
  // Under kBarrier a DEAD token's ids are those of a sequence's first token
  // when that token is the pad id: every window slot reads the pad.
  auto v41 = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(v41.is_ok());
  auto hasher = TableHasher::create(*v41, 1);
  ASSERT_TRUE(hasher.is_ok());
  std::vector<int64_t> dead(3 * 24), pad(24);
  ASSERT_TRUE(hasher->hash(std::vector<int64_t>{17, kDeadId, 5}, {}, dead).is_ok());
  ASSERT_TRUE(hasher->hash(std::vector<int64_t>{v41->pad_id}, {}, pad).is_ok());
  EXPECT_EQ(std::vector<int64_t>(dead.begin() + 24, dead.begin() + 48), pad);
  // And the token after it starts over: the same as a new sequence.
  std::vector<int64_t> alone(24);
  ASSERT_TRUE(hasher->hash(std::vector<int64_t>{5}, {}, alone).is_ok());
  EXPECT_EQ(std::vector<int64_t>(dead.begin() + 48, dead.end()), alone);
}

TEST(Hashing, RejectsBadInputsNamingThem) {
  const ModelSpec spec = hand_spec(DeadTokenRule::kBarrier);
  auto even = TableHasher::with_multipliers(spec, 0, {3, 4, 7});
  ASSERT_FALSE(even.is_ok());
  EXPECT_NE(even.status().message().find("m[1] = 4"), std::string::npos);
  // (10 - 1) * m must stay in int64.
  const int64_t largest = std::numeric_limits<int64_t>::max() / 9;
  const int64_t largest_odd = (largest & 1) ? largest : largest - 1;
  EXPECT_TRUE(TableHasher::with_multipliers(spec, 0, {3, 5, largest_odd}).is_ok());
  EXPECT_FALSE(TableHasher::with_multipliers(spec, 0, {3, 5, largest_odd + 2}).is_ok());
  EXPECT_FALSE(TableHasher::with_multipliers(spec, 0, {3, 5, -7}).is_ok());
  auto few = TableHasher::with_multipliers(spec, 0, {3, 5});
  EXPECT_FALSE(few.is_ok());

  auto hasher = TableHasher::with_multipliers(spec, 0, {3, 5, 7});
  ASSERT_TRUE(hasher.is_ok());
  std::vector<int64_t> ids(8);
  Status s = hasher->hash(std::vector<int64_t>{1, 10}, {}, ids);
  ASSERT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 1 has id 10"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("compressed vocabulary [0, 10)"), std::string::npos) << s.message();
  EXPECT_EQ(hasher->hash(std::vector<int64_t>{1, -2}, {}, ids).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(hasher->hash(std::vector<int64_t>{1, 2}, {}, std::span(ids).first(7)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(hasher->hash(std::vector<int64_t>{1, 2}, std::vector<uint8_t>{1}, ids).code(),
            ErrorCode::kInvalidArgument);

  // The token space is checked before any hashing.
  ModelSpec bad = spec;
  bad.pad_id = 10;
  auto padded = TableHasher::create(bad, 0);
  ASSERT_FALSE(padded.is_ok());
  EXPECT_NE(padded.status().message().find("model.pad_id: 10"), std::string::npos) << padded.status().message();
  bad = spec;
  bad.compressed_vocab_size = 0;
  EXPECT_FALSE(TableHasher::create(bad, 0).is_ok());
  bad = spec;
  bad.tables[0].layer_id = -1;
  auto negative = TableHasher::create(bad, 0);
  ASSERT_FALSE(negative.is_ok());
  EXPECT_NE(negative.status().message().find("layer id -1"), std::string::npos);
}

}  // namespace
}  // namespace engram
