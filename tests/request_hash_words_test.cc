// The device hasher's words: the modulo by reciprocal equals % for every
// non-negative int64 tried (the edges, V4.1's primes, random primes and
// values), head_row equals numpy's floor modulo for negative mixes too, and
// device_hash_heads holds the table's primes, offsets and orders.
#include "core/model/request_hash_words.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/model/hashing.h"
#include "core/model/table_spec.h"

namespace engram {
namespace {

TEST(RequestHashWords, ModByReciprocalEqualsTheDivision) {
  const auto v41 = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(v41.is_ok());
  std::vector<uint64_t> primes = {1, 2, 3, 5, 7, 1ull << 20, (1ull << 31) - 1, (1ull << 32) + 15, (1ull << 62) - 57,
                                  (1ull << 63) - 25};
  for (const TableSpec& t : v41->tables)
    for (int64_t p : t.primes) primes.push_back(static_cast<uint64_t>(p));
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) primes.push_back(1 + rng() % (1ull << (1 + rng() % 62)));
  const uint64_t top = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (uint64_t p : primes) {
    const uint64_t reciprocal = ~uint64_t{0} / p;
    std::vector<uint64_t> xs = {0, 1, p - 1, p, p + 1, 2 * p - 1, top, top - 1, top - p, top / p * p, top / p * p - 1};
    for (int k = 0; k < 2000; ++k) xs.push_back(rng() >> (1 + rng() % 63));
    for (uint64_t x : xs) {
      if (x > top) continue;
      ASSERT_EQ(mod_by_reciprocal(x, p, reciprocal), x % p) << "x " << x << " p " << p;
    }
  }
}

TEST(RequestHashWords, HeadRowIsTheFloorModuloPlusTheOffset) {
  const DeviceHashHead head{97, ~uint64_t{0} / 97, 1000, 2};
  for (int64_t mix : {int64_t{0}, int64_t{96}, int64_t{97}, int64_t{-1}, int64_t{-97}, int64_t{-98},
                      std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    int64_t r = mix % 97;
    if (r < 0) r += 97;
    EXPECT_EQ(head_row(mix, head), r + 1000) << mix;
  }
}

TEST(RequestHashWords, HeadsHoldTheTablesPrimesOffsetsAndOrders) {
  const auto v41 = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(v41.is_ok());
  const TableHasher h = *TableHasher::create(*v41, 1);
  const std::vector<DeviceHashHead> heads = device_hash_heads(h);
  ASSERT_EQ(heads.size(), 24u);
  for (size_t j = 0; j < heads.size(); ++j) {
    EXPECT_EQ(heads[j].prime, h.primes()[j]);
    EXPECT_EQ(heads[j].offset, h.offsets()[j]);
    EXPECT_EQ(heads[j].order, h.head_orders()[j]);
    EXPECT_EQ(heads[j].reciprocal, ~uint64_t{0} / static_cast<uint64_t>(h.primes()[j]));
  }
  EXPECT_EQ(device_hash_error_code(device_hash_error(DeviceHashErrorCode::kToken, 12345)), DeviceHashErrorCode::kToken);
  EXPECT_EQ(device_hash_error_index(device_hash_error(DeviceHashErrorCode::kToken, 12345)), 12345u);
  EXPECT_LT(device_hash_error(DeviceHashErrorCode::kRun, 1u << 30), device_hash_error(DeviceHashErrorCode::kToken, 0));
}

}  // namespace
}  // namespace engram
