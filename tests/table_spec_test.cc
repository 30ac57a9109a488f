#include "core/model/table_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/base/units.h"

namespace engram {
namespace {

TEST(TableSpec, V41FlashRowsAndBytesMatchDesign) {
  auto spec = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  ASSERT_EQ(spec->tables.size(), 2u);
  EXPECT_EQ(spec->tables[0].layer_id, 1);
  EXPECT_EQ(spec->tables[1].layer_id, 14);
  EXPECT_EQ(spec->tables[0].head_count(), 24);
  EXPECT_EQ(spec->tables[0].row_bytes(), 264u);
  EXPECT_EQ(spec->tables[0].row_count(), 384'006'168);
  EXPECT_EQ(spec->tables[1].row_count(), 384'016'682);
  EXPECT_EQ(spec->tables[0].table_bytes(), 101'377'628'352ull);
  EXPECT_EQ(spec->tables[1].table_bytes(), 101'380'404'048ull);
  EXPECT_EQ(format_gib(spec->tables[0].table_bytes()), "94.415 GiB");
  EXPECT_EQ(format_gib(spec->tables[1].table_bytes()), "94.418 GiB");
  EXPECT_EQ(format_gib(spec->table_bytes_total()), "188.833 GiB");
}

TEST(TableSpec, PrimesAreDistinctPrimesAboveVocab) {
  auto spec = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(spec.is_ok());
  std::vector<int64_t> all;
  for (const auto& t : spec->tables)
    for (int64_t p : t.primes) {
      EXPECT_TRUE(is_prime(p)) << p;
      EXPECT_GT(p, spec->engram_vocab_size - 1);
      all.push_back(p);
    }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
}

TEST(TableSpec, EachOrderRestartsTheSearch) {
  // vocab 10: primes above 9 are 11 13 17 19 23 29 31 37. With 2 orders x 2
  // heads, order 2 restarts at 9 but skips used primes, so the sequence is the
  // same as one long search; a second layer continues it.
  auto primes = draw_primes(10, 2, 2, 2);
  EXPECT_EQ(primes[0], (std::vector<int64_t>{11, 13, 17, 19}));
  EXPECT_EQ(primes[1], (std::vector<int64_t>{23, 29, 31, 37}));
}

// The search as the reference writes it, each order restarting at its
// start and walking past every prime used so far: quadratic in layers x
// orders, kept here as the definition the fast search must equal.
std::vector<std::vector<int64_t>> primes_as_the_reference_draws_them(const std::vector<int64_t>& starts, int layers,
                                                                      int heads) {
  std::set<int64_t> used;
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(layers));
  for (int layer = 0; layer < layers; ++layer)
    for (int64_t start : starts) {
      int64_t candidate = start - 1;
      for (int h = 0; h < heads; ++h) {
        do {
          ++candidate;
        } while (!is_prime(candidate) || used.count(candidate) != 0);
        used.insert(candidate);
        out[static_cast<size_t>(layer)].push_back(candidate);
      }
    }
  return out;
}

TEST(TableSpec, PrimesAreTheReferenceSearchsForEveryShippedModelAndOverlappingStarts) {
  for (const std::string& name : model_preset_names()) {
    SCOPED_TRACE(name);
    const ModelSpec spec = model_preset(name).value();
    const TableSpec& first = spec.tables.front();
    const auto want = primes_as_the_reference_draws_them(spec.engram_vocab_size_per_order,
                                                         static_cast<int>(spec.tables.size()), first.heads_per_order);
    for (size_t t = 0; t < spec.tables.size(); ++t) EXPECT_EQ(spec.tables[t].primes, want[t]) << t;
  }
  // Orders with their own starts, some shared, some inside another's walk, and starts near a prime.
  for (const std::vector<int64_t>& starts : std::vector<std::vector<int64_t>>{
           {10, 12, 10}, {1000, 1003, 1000, 1050}, {2, 3, 2}, {16000000, 16000000, 16000000}, {97, 89, 101}}) {
    for (int heads : {1, 3, 8}) {
      SCOPED_TRACE(testing::Message() << starts.size() << " orders from " << starts.front() << ", " << heads);
      EXPECT_EQ(draw_primes(starts, 5, heads), primes_as_the_reference_draws_them(starts, 5, heads));
    }
  }
}

// 64 layers x 8 orders x 1,024 heads at 2^30 took more than ten minutes:
// each order re-tested every prime already used. Now each number from the
// start to the last prime drawn is tested once, whatever the orders and
// layers (the work is asserted, the time only printed).
TEST(TableSpec, PrimeSearchTestsEachNumberOncePerStart) {
  const int64_t start = int64_t{1} << 30;
  PrimeSearchWork work;
  const auto began = std::chrono::steady_clock::now();
  const auto primes = draw_primes(std::vector<int64_t>(8, start), 64, 1024, &work);
  std::printf("64 layers x 8 orders x 1,024 heads from 2^30: %.2f s, %llu primality tests\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count(),
              static_cast<unsigned long long>(work.primality_tests));
  int64_t last = 0;
  size_t count = 0;
  for (const auto& layer : primes) {
    count += layer.size();
    for (int64_t p : layer) last = std::max(last, p);
  }
  EXPECT_EQ(count, size_t{64} * 8 * 1024);
  EXPECT_EQ(work.distinct_starts, 1u);
  EXPECT_EQ(work.primality_tests, static_cast<uint64_t>(last - (start - 1)));
  // The 524,288 primes above 2^30 span about 524,288 x ln(2^30) numbers.
  EXPECT_LT(work.primality_tests, uint64_t{524288} * 25);
  // Per distinct start: two starts walk their own numbers once each.
  PrimeSearchWork two;
  draw_primes({1000, 5000, 1000, 5000}, 3, 4, &two);
  EXPECT_EQ(two.distinct_starts, 2u);
}

TEST(TableSpec, TablesWhoseBytesPass64BitsAreAnErrorNamingTheField) {
  // 1 order x 256 heads of ~2^40 rows x 65,536-byte rows: 16 EiB, which wrapped to 0.289 GiB.
  auto wrapped = make_model_spec("x", int64_t{1099511627000}, {1}, {2}, 256, RowFormat::kBf16, 32768, 0);
  ASSERT_FALSE(wrapped.is_ok());
  EXPECT_EQ(wrapped.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(wrapped.status().message(), ::testing::StartsWith("model.tables: "));
  EXPECT_THAT(wrapped.status().message(), ::testing::HasSubstr("1 EiB"));
  // Past the size bound without wrapping: refused alike.
  EXPECT_FALSE(make_model_spec("x", int64_t{1} << 40, {1, 2, 3, 4}, {2, 3}, 1024, RowFormat::kBf16, 65536, 0).is_ok());
  // validate() holds a spec built by hand too (its primes given, not drawn).
  ModelSpec spec = make_model_spec("x", 1000, {1}, {2}, 2, RowFormat::kBf16, 32768, 0).value();
  spec.tables[0].primes = {(int64_t{1} << 62) + 1, (int64_t{1} << 62) + 1};
  const Status s = validate(spec);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::StartsWith("model.tables: layer 1's table"));
  // At the bound's edge a model is accepted and its sizes are exact.
  auto edge = make_model_spec("x", int64_t{1} << 40, {1}, {2}, 8, RowFormat::kBf16, 32768, 0);
  ASSERT_TRUE(edge.is_ok()) << edge.status().to_string();
  EXPECT_EQ(edge->table_bytes_total(), static_cast<uint64_t>(edge->tables[0].row_count()) * 65536);
}

TEST(TableSpec, UnknownModelNamesTheFieldAndTheChoices) {
  auto spec = model_preset("deepseek-v9");
  ASSERT_FALSE(spec.is_ok());
  EXPECT_EQ(spec.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("deepseek-v9"), std::string::npos);
  EXPECT_NE(spec.status().message().find("deepseek-v4.1-flash"), std::string::npos);
}

TEST(TableSpec, Fp8DimMustHoldWholeScaleBlocks) {
  auto spec = make_model_spec("x", 100, {1}, {2}, 1, RowFormat::kFp8E4M3Ue8m0, 40, 1);
  ASSERT_FALSE(spec.is_ok());
  EXPECT_NE(spec.status().message().find("model.dim"), std::string::npos);
}

TEST(Units, ParsesUnitsAndRejectsNegatives) {
  EXPECT_EQ(*parse_bytes("64MiB", "shm"), 64 * kMiB);
  EXPECT_EQ(*parse_bytes("190GiB", "shm"), 190 * kGiB);
  EXPECT_EQ(*parse_bytes("64m", "shm"), 64 * kMiB);
  EXPECT_EQ(*parse_bytes("1.5GiB", "shm"), 3 * kGiB / 2);
  EXPECT_EQ(*parse_bytes("1000B", "shm"), 1000u);
  EXPECT_EQ(*parse_bytes("2GB", "shm"), 2'000'000'000u);
  EXPECT_EQ(*parse_bytes("190G", "shm"), 190 * kGiB);  // G is GiB, as Docker reads it
  // Fractions round to the nearest byte.
  EXPECT_EQ(*parse_bytes("189.9GiB", "shm"), static_cast<uint64_t>(std::llround(189.9 * static_cast<double>(kGiB))));
  EXPECT_EQ(*parse_bytes("0.3B", "shm"), 0u);
  EXPECT_EQ(*parse_bytes("0.5KiB", "shm"), 512u);
  // A bare number is refused with the three ways to say what was meant.
  auto bare = parse_bytes("141", "--gpu-memory");
  ASSERT_FALSE(bare.is_ok());
  EXPECT_EQ(bare.status().code(), ErrorCode::kInvalidArgument);
  for (const char* word : {"--gpu-memory", "'141' has no unit", "141GiB", "141GB", "141B"})
    EXPECT_NE(bare.status().message().find(word), std::string::npos) << word << ": " << bare.status().message();
  auto negative = parse_bytes("-5GiB", "hosts[0].tmpfs_size");
  ASSERT_FALSE(negative.is_ok());
  EXPECT_NE(negative.status().message().find("hosts[0].tmpfs_size"), std::string::npos);
  EXPECT_NE(negative.status().message().find("negative"), std::string::npos);
  EXPECT_FALSE(parse_bytes("12 parsecs", "x").is_ok());
  EXPECT_FALSE(parse_bytes("", "x").is_ok());
}

}  // namespace
}  // namespace engram
