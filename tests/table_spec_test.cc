#include "core/model/table_spec.h"

#include <gtest/gtest.h>

#include <cmath>

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
