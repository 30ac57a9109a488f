// PagedBytes against a flat byte vector: seeded sequences of writes, zero
// fills and shares (aligned or not, inside a page, across pages and
// extents) must read back as the flat model reads, for_each_written must
// rebuild the same bytes, shared_view must hand out exactly the shared
// bytes, and a shared buffer must never change under its other holders.
#include "sim/paged_bytes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace engram::sim {
namespace {

constexpr uint64_t kPage = kSimPageBytes;

SharedBytes random_bytes(std::mt19937_64& rng, uint64_t n) {
  auto data = std::make_shared<std::vector<std::byte>>(n);
  for (auto& b : *data) b = std::byte(static_cast<uint8_t>(rng()));
  return data;
}

void expect_reads_as(const PagedBytes& bytes, const std::vector<std::byte>& want, const char* after) {
  std::vector<std::byte> got(want.size());
  bytes.read(0, got);
  ASSERT_EQ(got, want) << "after " << after;
  // for_each_written rebuilds it too: what it skips reads as zeros.
  std::vector<std::byte> rebuilt(want.size());
  uint64_t last_end = 0;
  bytes.for_each_written(0, want.size(), [&](uint64_t at, std::span<const std::byte> part) {
    ASSERT_GE(at, last_end) << "parts out of order or overlapping, after " << after;
    std::memcpy(rebuilt.data() + at, part.data(), part.size());
    last_end = at + part.size();
  });
  ASSERT_EQ(rebuilt, want) << "for_each_written, after " << after;
}

TEST(PagedBytes, SeededOperationsReadAsAFlatBuffer) {
  constexpr uint64_t kBytes = 24 * kPage + 300;  // a ragged last page
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    PagedBytes bytes;
    std::vector<std::byte> flat(kBytes);
    // Shared buffers and the copies taken when they were handed out.
    std::vector<std::pair<SharedBytes, std::vector<std::byte>>> handed_out;
    auto pick_range = [&](uint64_t& offset, uint64_t& length) {
      switch (rng() % 4) {
        case 0: offset = rng() % kBytes; length = 1 + rng() % std::min<uint64_t>(64, kBytes - offset); break;
        case 1: offset = (rng() % 24) * kPage; length = std::min<uint64_t>(kBytes - offset, (1 + rng() % 6) * kPage); break;
        default: offset = rng() % kBytes; length = 1 + rng() % (kBytes - offset); break;
      }
    };
    for (int step = 0; step < 40; ++step) {
      uint64_t offset = 0, length = 0;
      pick_range(offset, length);
      const int op = static_cast<int>(rng() % 3);
      if (op == 0) {
        auto data = random_bytes(rng, length);
        bytes.write(offset, *data);
        std::memcpy(flat.data() + offset, data->data(), length);
      } else if (op == 1) {
        bytes.zero(offset, length);
        std::memset(flat.data() + offset, 0, length);
      } else {
        const uint64_t data_offset = rng() % 3 == 0 ? rng() % 100 : 0;
        auto data = random_bytes(rng, data_offset + length + rng() % 50);
        bytes.share(offset, data, data_offset, length);
        std::memcpy(flat.data() + offset, data->data() + data_offset, length);
        handed_out.push_back({data, *data});
        // What lies inside one extent is the shared buffer itself.
        if (auto view = bytes.shared_view(offset + (kPage - offset % kPage) % kPage, kPage)) {
          EXPECT_EQ(std::memcmp(view->data->data() + view->data_offset,
                                flat.data() + offset + (kPage - offset % kPage) % kPage, kPage),
                    0);
        }
      }
      ASSERT_NO_FATAL_FAILURE(expect_reads_as(bytes, flat, op == 0 ? "write" : op == 1 ? "zero" : "share"))
          << "seed " << seed << " step " << step << " offset " << offset << " length " << length;
    }
    for (const auto& [data, copy] : handed_out) ASSERT_EQ(*data, copy) << "a shared buffer changed, seed " << seed;
  }
}

TEST(PagedBytes, ASharedRangeIsOneExtentUntilWrittenInto) {
  std::mt19937_64 rng(7);
  auto data = random_bytes(rng, 10 * kPage);
  PagedBytes a, b;
  a.share(0, data, 0, data->size());
  b.share(0, data, 0, data->size());
  EXPECT_EQ(a.extent_count(), 1u);
  EXPECT_EQ(a.page_count(), 0u);
  auto view = a.shared_view(3 * kPage + 5, 100);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->data, data);
  EXPECT_EQ(view->data_offset, 3 * kPage + 5);
  // One byte written in page 4 of `a` copies that page out: a holds two
  // extents around it, b and the buffer are unchanged.
  const std::byte mark{0x5a};
  a.write(4 * kPage + 1, std::span(&mark, 1));
  EXPECT_EQ(a.extent_count(), 2u);
  EXPECT_EQ(a.page_count(), 1u);
  EXPECT_FALSE(a.shared_view(4 * kPage, 10).has_value());
  std::byte got{};
  a.read(4 * kPage + 1, std::span(&got, 1));
  EXPECT_EQ(got, mark);
  b.read(4 * kPage + 1, std::span(&got, 1));
  EXPECT_EQ(got, (*data)[4 * kPage + 1]);
  // A zero fill over the whole range drops everything a held.
  a.zero(0, data->size());
  EXPECT_EQ(a.extent_count(), 0u);
  EXPECT_EQ(a.page_count(), 0u);
}

TEST(PagedBytes, AnUnalignedShareCopiesItsHeadAndKeepsAZeroTailInTheExtent) {
  std::mt19937_64 rng(9);
  auto data = random_bytes(rng, 3 * kPage);
  // Half a page copied, then two whole pages and the last half page shared:
  // the rest of that page was never written, so it still reads as zeros.
  PagedBytes bytes;
  bytes.share(kPage / 2, data, 0, data->size());
  EXPECT_EQ(bytes.extent_count(), 1u);
  EXPECT_EQ(bytes.page_count(), 1u);
  std::vector<std::byte> got(data->size() + kPage / 2);
  bytes.read(kPage / 2, got);
  EXPECT_TRUE(std::equal(data->begin(), data->end(), got.begin()));
  EXPECT_TRUE(std::all_of(got.begin() + static_cast<long>(data->size()), got.end(), [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(bytes.shared_view(kPage, 2 * kPage + kPage / 2).has_value());
  // Sharing it again (a lookup rewrites its buffer each step) keeps one extent.
  auto next = random_bytes(rng, 3 * kPage);
  bytes.share(kPage / 2, next, 0, next->size());
  EXPECT_EQ(bytes.extent_count(), 1u);
  EXPECT_EQ(bytes.page_count(), 1u);
  // Where the last page holds other bytes, the tail is copied instead.
  PagedBytes written;
  const std::byte mark{0x11};
  written.write(3 * kPage + kPage / 2 + 5, std::span(&mark, 1));
  written.share(kPage / 2, data, 0, data->size());
  EXPECT_EQ(written.extent_count(), 1u);
  EXPECT_EQ(written.page_count(), 2u);
  std::byte after{};
  written.read(3 * kPage + kPage / 2 + 5, std::span(&after, 1));
  EXPECT_EQ(after, mark);
  // Shorter than to the next page boundary: no extent at all.
  PagedBytes small;
  small.share(10, data, 0, 100);
  EXPECT_EQ(small.extent_count(), 0u);
  EXPECT_EQ(small.page_count(), 1u);
}

}  // namespace
}  // namespace engram::sim
