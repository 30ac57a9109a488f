#include "core/base/warnings.h"

#include <gtest/gtest.h>

#include <string>
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

// The process sink is what "once per process" rests on: a key emitted from
// several threads, each fetching the sink anew, is recorded and printed once,
// with the text of the first emit, in the sink's stderr format.
TEST(WarningSink, ProcessSinkPrintsEachKeyOncePerProcess) {
  const std::string key = "warnings_test.process_sink_once";
  ASSERT_FALSE(WarningSink::process().seen(key));
  testing::internal::CaptureStderr();
  EXPECT_TRUE(WarningSink::process().emit({key, "first"}));
  std::vector<std::thread> threads;
  std::vector<int> took(4, 0);
  for (size_t t = 0; t < took.size(); ++t)
    threads.emplace_back([&, t] { took[t] = WarningSink::process().emit({key, "again"}) ? 1 : 0; });
  for (auto& t : threads) t.join();
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed, "engramlab warning [" + key + "]: first\n");
  for (int t : took) EXPECT_EQ(t, 0);
  EXPECT_TRUE(WarningSink::process().seen(key));
  size_t recorded = 0;
  for (const Warning& w : WarningSink::process().warnings())
    if (w.key == key) {
      ++recorded;
      EXPECT_EQ(w.text, "first");
    }
  EXPECT_EQ(recorded, 1u);
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
