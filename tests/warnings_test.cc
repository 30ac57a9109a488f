#include "core/base/warnings.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace engram {
namespace {

TEST(WarningSink, SameKeyIsRecordedOnce) {
  std::vector<Warning> heard;
  WarningSink sink([&](const Warning& w) { heard.push_back(w); });
  // Two layers hitting the same fallback: one warning.
  EXPECT_TRUE(sink.emit({"dp_shared_memory.fallback.shm_too_small", "layer 1"}));
  EXPECT_FALSE(sink.emit({"dp_shared_memory.fallback.shm_too_small", "layer 14"}));
  EXPECT_TRUE(sink.emit({"peer_shards.precedence", "p"}));
  ASSERT_EQ(sink.size(), 2u);
  EXPECT_EQ(sink.warnings()[0].text, "layer 1");
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_TRUE(sink.seen("peer_shards.precedence"));
  EXPECT_FALSE(sink.seen("other"));
}

TEST(WarningSink, ConcurrentEmittersRecordOnce) {
  WarningSink sink;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) sink.emit({"k" + std::to_string(i % 3), "x"});
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(sink.size(), 3u);
}

TEST(WarningSink, ProcessSinkIsOneInstance) {
  EXPECT_EQ(&WarningSink::process(), &WarningSink::process());
}

TEST(AppendUnique, DedupsByKey) {
  std::vector<Warning> list;
  append_unique(list, {"a", "1"});
  append_unique(list, {"a", "2"});
  append_unique(list, {"b", "3"});
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].text, "1");
}

}  // namespace
}  // namespace engram
