// PrivateMemory: zeroed, writable, unmapped when it goes (or is moved over),
// and a refused mapping is resource_exhausted naming the size.
#include "core/base/private_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

namespace engram {
namespace {

// Whether /proc/self/maps has a mapping starting at `at`.
bool mapped_at(const void* at) {
  std::ifstream maps("/proc/self/maps");
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", reinterpret_cast<unsigned long>(at));
  for (std::string line; std::getline(maps, line);)
    if (line.rfind(start, 0) == 0) return true;
  return false;
}

TEST(PrivateMemory, ZeroedWritableAndUnmappedWhenItGoes) {
  const void* at = nullptr;
  {
    auto memory = PrivateMemory::map(3 << 20);
    ASSERT_TRUE(memory.is_ok()) << memory.status().to_string();
    std::span<std::byte> bytes = memory->bytes();
    ASSERT_EQ(bytes.size(), size_t{3} << 20);
    EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; }));
    std::fill(bytes.begin(), bytes.end(), std::byte{0x5a});
    EXPECT_EQ(bytes.back(), std::byte{0x5a});
    at = bytes.data();
    EXPECT_TRUE(mapped_at(at));
    // Moved: the new owner holds it, the old one nothing.
    PrivateMemory first = std::move(memory).value();
    PrivateMemory moved = std::move(first);
    EXPECT_EQ(moved.bytes().data(), at);
    EXPECT_TRUE(first.bytes().empty());
    // Moved over: the old mapping of the target goes.
    auto other = PrivateMemory::map(1 << 20);
    ASSERT_TRUE(other.is_ok());
    const void* other_at = other->bytes().data();
    moved = std::move(other).value();
    EXPECT_FALSE(mapped_at(at));
    EXPECT_EQ(moved.bytes().data(), other_at);
    at = other_at;
  }
  EXPECT_FALSE(mapped_at(at));
}

TEST(PrivateMemory, NothingMappedForZeroBytes) {
  auto memory = PrivateMemory::map(0);
  ASSERT_TRUE(memory.is_ok());
  EXPECT_TRUE(memory->bytes().empty());
  EXPECT_FALSE(memory->huge_pages_advised());
}

TEST(PrivateMemory, ARefusedMappingIsResourceExhaustedNamingTheSize) {
  // More than any address space holds (2^62 bytes).
  auto memory = PrivateMemory::map(uint64_t{1} << 62);
  ASSERT_FALSE(memory.is_ok());
  EXPECT_EQ(memory.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(memory.status().message().find("4294967296"), std::string::npos) << memory.status().to_string();
  EXPECT_NE(memory.status().message().find("host_shared"), std::string::npos);
}

}  // namespace
}  // namespace engram
