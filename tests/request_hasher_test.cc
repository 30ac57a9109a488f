// RequestHasher on the engines' own cases (numbers as their tests use them)
// and on bad input. The drawn schedules are tests/request_schedule_test.cc.
#include "core/model/request_hasher.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "core/base/text_list.h"
#include "core/model/hashing.h"
#include "core/model/table_spec.h"

namespace engram {
namespace {

const ModelSpec& v41() {
  static const ModelSpec spec = [] {
    auto s = model_preset("deepseek-v4.1-flash");
    EXPECT_TRUE(s.is_ok());
    return *s;
  }();
  return spec;
}

TableHasher v41_hasher(int table) {
  auto h = TableHasher::create(v41(), table);
  EXPECT_TRUE(h.is_ok());
  return *h;
}

std::vector<int64_t> whole(const TableHasher& h, const std::vector<int64_t>& tokens) {
  std::vector<int64_t> ids(tokens.size() * static_cast<size_t>(h.head_count()));
  EXPECT_TRUE(h.hash(tokens, {}, ids).is_ok());
  return ids;
}

// The ids of the last `n` tokens of `tokens` hashed whole.
std::vector<int64_t> whole_tail(const TableHasher& h, const std::vector<int64_t>& tokens, size_t n) {
  const std::vector<int64_t> ids = whole(h, tokens);
  return std::vector<int64_t>(ids.end() - static_cast<std::ptrdiff_t>(n * static_cast<size_t>(h.head_count())), ids.end());
}

// An oracle of the history written from its definition, not from advance():
// the last max_order - 1 ids, newest first, pad where the sequence had not
// begun or (under a barrier rule) at and behind the newest DEAD.
std::vector<int64_t> history_by_definition(const TableHasher& h, const std::vector<int64_t>& accepted) {
  std::vector<int64_t> out;
  bool blocked = false;
  for (int k = 0; k < h.history_length(); ++k) {
    const int64_t pos = static_cast<int64_t>(accepted.size()) - 1 - k;
    if (pos < 0) blocked = true;
    if (!blocked && h.dead_token_rule() != DeadTokenRule::kLiteral && accepted[static_cast<size_t>(pos)] == kDeadId)
      blocked = true;
    out.push_back(blocked ? h.pad_id() : accepted[static_cast<size_t>(pos)]);
  }
  return out;
}

std::vector<int64_t> draw(uint64_t& state, size_t n, int64_t vocab) {
  std::vector<int64_t> t(n);
  for (int64_t& x : t) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

// vLLM test_engram_hash_cache_replay: 2 requests, 3 steps of `query_length`
// tokens each, every 5th token DEAD, the third step fully padded (the slots
// idle): the history is untouched by it, and the step after continues as
// hashing each request whole.
TEST(RequestHasherEngineCases, VllmHashCacheReplay) {
  for (int table : {0, 1}) {  // layers 1 and 14
    const TableHasher h = v41_hasher(table);
    ASSERT_EQ(h.max_order(), 4);
    ASSERT_EQ(h.compressed_vocab_size(), 99'092);
    for (size_t query_length : {1u, 17u, 257u}) {
      SCOPED_TRACE(fmt::format("layer table {}, query length {}", table, query_length));
      auto rh = RequestHasher::create(h, 2);
      ASSERT_TRUE(rh.is_ok());
      ASSERT_TRUE(rh->begin(0).is_ok());
      ASSERT_TRUE(rh->begin(1).is_ok());
      uint64_t state = 99 + query_length;
      std::vector<std::vector<int64_t>> accepted(2);
      int64_t position = 0;
      auto step = [&](bool padded) {
        std::vector<int64_t> tokens;
        std::vector<RequestRun> runs;
        std::vector<std::vector<int64_t>> added(2);
        for (int r = 0; r < 2; ++r) {
          added[r] = draw(state, query_length, h.compressed_vocab_size());
          for (int64_t& t : added[r])
            if (++position % 5 == 0) t = kDeadId;
          runs.push_back(RequestRun{padded ? kIdleSlot : r, static_cast<int64_t>(tokens.size()),
                                    static_cast<int64_t>(query_length)});
          tokens.insert(tokens.end(), added[r].begin(), added[r].end());
        }
        std::vector<int64_t> ids(tokens.size() * 24, 0);
        ASSERT_TRUE(rh->extend(tokens, runs, ids).is_ok());
        for (int r = 0; r < 2; ++r) {
          const auto got = std::vector<int64_t>(ids.begin() + runs[r].token_begin * 24,
                                                ids.begin() + (runs[r].token_begin + runs[r].token_count) * 24);
          if (padded) {
            EXPECT_EQ(got, std::vector<int64_t>(got.size(), kDeadId)) << "an idle slot reads no row (not row 0)";
          } else {
            accepted[r].insert(accepted[r].end(), added[r].begin(), added[r].end());
            EXPECT_EQ(got, whole_tail(h, accepted[r], query_length)) << "request " << r;
          }
        }
      };
      step(false);
      step(false);
      const std::vector<int64_t> h0(rh->history(0).begin(), rh->history(0).end());
      const std::vector<int64_t> h1(rh->history(1).begin(), rh->history(1).end());
      step(true);
      EXPECT_EQ(std::vector<int64_t>(rh->history(0).begin(), rh->history(0).end()), h0);
      EXPECT_EQ(std::vector<int64_t>(rh->history(1).begin(), rh->history(1).end()), h1);
      EXPECT_EQ(h0, history_by_definition(h, accepted[0]));
      step(false);  // after the padded step, as if it never happened
    }
  }
}

// vLLM test_lookback_window_reproduces_single_instance: 2 requests fed in
// chunks of 1-2 tokens, image tokens (DEAD) at positions 14 and 22; every
// chunk on a fresh instance given the lookback ids hashes what one instance
// hashes. Negative control: without the lookback the ids differ.
TEST(RequestHasherEngineCases, VllmLookbackWindowReproducesSingleInstance) {
  const TableHasher h = v41_hasher(0);
  uint64_t state = 7;
  for (int request = 0; request < 2; ++request) {
    std::vector<int64_t> sequence = draw(state, 30, h.compressed_vocab_size());
    sequence[14] = kDeadId;
    sequence[22] = kDeadId;
    auto single = RequestHasher::create(h, 1);
    ASSERT_TRUE(single->begin(0).is_ok());
    size_t at = 0;
    bool some_chunk_differs_without_lookback = false;
    while (at < sequence.size()) {
      const size_t n = std::min<size_t>(sequence.size() - at, 1 + (at % 2));
      const std::vector<int64_t> chunk(sequence.begin() + at, sequence.begin() + at + n);
      const std::vector<RequestRun> runs = {{0, 0, static_cast<int64_t>(n)}};
      std::vector<int64_t> one(n * 24), fresh(n * 24), blind(n * 24);
      ASSERT_TRUE(single->extend(chunk, runs, one).is_ok());
      auto instance = RequestHasher::create(h, 1);
      const std::vector<int64_t> lookback(sequence.begin() + std::max<ptrdiff_t>(0, static_cast<ptrdiff_t>(at) - 3),
                                          sequence.begin() + at);
      ASSERT_TRUE(instance->begin(0, lookback).is_ok());
      ASSERT_TRUE(instance->extend(chunk, runs, fresh).is_ok());
      EXPECT_EQ(fresh, one) << "request " << request << " chunk at " << at;
      EXPECT_EQ(one, whole_tail(h, std::vector<int64_t>(sequence.begin(), sequence.begin() + at + n), n));
      auto no_lookback = RequestHasher::create(h, 1);
      ASSERT_TRUE(no_lookback->begin(0).is_ok());
      ASSERT_TRUE(no_lookback->extend(chunk, runs, blind).is_ok());
      some_chunk_differs_without_lookback |= blind != one;
      at += n;
    }
    EXPECT_TRUE(some_chunk_differs_without_lookback);
  }
}

// SGLang's chunked extend: two requests with prefix histories [3, 4, 5] and
// [6, 7, 8] (a prefix-cache hit), three chunks of lengths [5 + c, 3]; after
// every chunk the history equals the oracle's and the ids the whole hash's.
TEST(RequestHasherEngineCases, SglangChunkedExtendFromPrefixHistories) {
  const TableHasher h = v41_hasher(1);
  auto rh = RequestHasher::create(h, 2);
  std::vector<std::vector<int64_t>> accepted = {{3, 4, 5}, {6, 7, 8}};
  ASSERT_TRUE(rh->begin(0, accepted[0]).is_ok());
  ASSERT_TRUE(rh->begin(1, accepted[1]).is_ok());
  EXPECT_EQ(std::vector<int64_t>(rh->history(0).begin(), rh->history(0).end()), (std::vector<int64_t>{5, 4, 3}));
  uint64_t state = 3;
  for (int c = 0; c < 3; ++c) {
    const std::vector<size_t> lengths = {5u + static_cast<size_t>(c), 3u};
    std::vector<int64_t> tokens;
    std::vector<RequestRun> runs;
    for (int r = 0; r < 2; ++r) {
      const std::vector<int64_t> chunk = draw(state, lengths[r], h.compressed_vocab_size());
      runs.push_back({r, static_cast<int64_t>(tokens.size()), static_cast<int64_t>(chunk.size())});
      tokens.insert(tokens.end(), chunk.begin(), chunk.end());
      accepted[r].insert(accepted[r].end(), chunk.begin(), chunk.end());
    }
    std::vector<int64_t> ids(tokens.size() * 24);
    ASSERT_TRUE(rh->extend(tokens, runs, ids).is_ok());
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(std::vector<int64_t>(rh->history(r).begin(), rh->history(r).end()), history_by_definition(h, accepted[r]))
          << "chunk " << c << " request " << r;
      EXPECT_EQ(std::vector<int64_t>(ids.begin() + runs[r].token_begin * 24,
                                     ids.begin() + (runs[r].token_begin + runs[r].token_count) * 24),
                whole_tail(h, accepted[r], lengths[r]));
    }
  }
}

// SGLang's verify/commit, ragged blocks (its issue 39173): blocks of 1, 3
// and 5 tokens; commit 0, 2 and 4 drafts; the rejected drafts leave no trace.
TEST(RequestHasherEngineCases, SglangRaggedVerifyThenCommit) {
  const TableHasher h = v41_hasher(0);
  auto rh = RequestHasher::create(h, 3);
  std::vector<std::vector<int64_t>> accepted = {{10, 11}, {20}, {}};
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(rh->begin(r, accepted[r]).is_ok());
  const std::vector<std::vector<int64_t>> blocks = {{100}, {200, 201, 202}, {300, 301, kDeadId, 303, 304}};
  const std::vector<int64_t> accept = {0, 2, 4};
  std::vector<int64_t> tokens = {55};  // padding first
  std::vector<RequestRun> runs;
  for (int r = 2; r >= 0; --r) {  // runs in any order
    runs.push_back({r, static_cast<int64_t>(tokens.size()), static_cast<int64_t>(blocks[r].size())});
    tokens.insert(tokens.end(), blocks[r].begin(), blocks[r].end());
  }
  std::vector<int64_t> ids(tokens.size() * 24);
  ASSERT_TRUE(rh->verify(tokens, runs, ids).is_ok());
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 24), std::vector<int64_t>(24, kDeadId));
  for (const RequestRun& run : runs) {
    std::vector<int64_t> with_block = accepted[run.slot];
    with_block.insert(with_block.end(), blocks[run.slot].begin(), blocks[run.slot].end());
    EXPECT_EQ(std::vector<int64_t>(ids.begin() + run.token_begin * 24, ids.begin() + (run.token_begin + run.token_count) * 24),
              whole_tail(h, with_block, blocks[run.slot].size()));
    EXPECT_EQ(rh->state(run.slot), RequestHasher::SlotState::kVerifyPending);
  }
  // A pending block refuses another step until committed.
  std::vector<int64_t> one(24);
  EXPECT_EQ(rh->extend(std::vector<int64_t>{1}, std::vector<RequestRun>{{1, 0, 1}}, one).code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(rh->commit(std::vector<VerifyCommit>{{1, accept[1]}, {0, accept[0]}, {2, accept[2]}}).is_ok());
  for (int r = 0; r < 3; ++r) {
    accepted[r].insert(accepted[r].end(), blocks[r].begin(), blocks[r].begin() + 1 + accept[r]);
    EXPECT_EQ(std::vector<int64_t>(rh->history(r).begin(), rh->history(r).end()), history_by_definition(h, accepted[r]));
    // The next decode token continues the accepted sequence.
    ASSERT_TRUE(rh->extend(std::vector<int64_t>{42}, std::vector<RequestRun>{{r, 0, 1}}, one).is_ok());
    accepted[r].push_back(42);
    EXPECT_EQ(one, whole_tail(h, accepted[r], 1));
  }
}

// Bad input: invalid_argument naming the request and the field; no history
// (nor slot state) changed.
TEST(RequestHasherBadInput, NamedErrorsAndNothingChanged) {
  const TableHasher h = v41_hasher(0);
  auto rh = RequestHasher::create(h, 2);
  ASSERT_TRUE(rh->begin(0, std::vector<int64_t>{1, 2, 3, 4}).is_ok());
  ASSERT_TRUE(rh->begin(1).is_ok());
  std::vector<int64_t> ids(3 * 24);
  ASSERT_TRUE(rh->verify(std::vector<int64_t>{5, 6, 7}, std::vector<RequestRun>{{1, 0, 3}}, ids).is_ok());
  auto snapshot = [&] {
    std::vector<int64_t> s;
    for (int slot = 0; slot < 2; ++slot) {
      s.insert(s.end(), rh->history(slot).begin(), rh->history(slot).end());
      s.push_back(static_cast<int64_t>(rh->state(slot)));
    }
    return s;
  };
  const std::vector<int64_t> before = snapshot();
  struct Case {
    std::string name;
    Status status;
    std::vector<std::string> words;
  };
  std::vector<int64_t> one(24), two(2 * 24);
  const Case cases[] = {
      {"token outside the vocabulary",
       rh->extend(std::vector<int64_t>{7, 99'092}, std::vector<RequestRun>{{0, 0, 2}}, two),
       {"request 0", "tokens[1]", "99092", "compressed vocabulary"}},
      {"commit of more drafts than verified", rh->commit(std::vector<VerifyCommit>{{1, 3}}),
       {"request 0", "slot 1", "accepted_drafts is 3", "held 2 drafts"}},
      {"a step over the slot count", rh->extend(std::vector<int64_t>{7}, std::vector<RequestRun>{{2, 0, 1}}, one),
       {"request 0", "runs[0].slot is 2", "slots are 0..1"}},
      {"a run past the token array", rh->extend(std::vector<int64_t>{7}, std::vector<RequestRun>{{0, 0, 2}}, one),
       {"request 0", "runs[0]", "token_count"}},
      {"a slot twice in one batch",
       rh->extend(std::vector<int64_t>{7, 8}, std::vector<RequestRun>{{0, 0, 1}, {0, 1, 1}}, two),
       {"request 1", "runs[1].slot 0 appears twice"}},
      {"row_ids of the wrong size", rh->extend(std::vector<int64_t>{7}, std::vector<RequestRun>{{0, 0, 1}}, two),
       {"row_ids holds 48 ids", "need 24"}},
      {"begin on a busy slot", rh->begin(0), {"slot 0 is active", "release it"}},
      {"a DEAD-free bad preceding id", rh->release(0).is_ok() ? rh->begin(0, std::vector<int64_t>{-5}) : Status::ok(),
       {"preceding_ids[0]", "-5"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), ErrorCode::kInvalidArgument) << c.name << ": " << c.status.to_string();
    for (const std::string& w : c.words)
      EXPECT_NE(c.status.message().find(w), std::string::npos) << c.name << ": '" << w << "' not in: " << c.status.message();
  }
  // Slot 0 was released on purpose above (a released slot's history is not
  // read again); everything else is as before.
  std::vector<int64_t> after = snapshot();
  EXPECT_EQ(rh->state(0), RequestHasher::SlotState::kFree);
  const size_t slot1 = static_cast<size_t>(h.history_length()) + 1;
  EXPECT_EQ(std::vector<int64_t>(after.begin() + static_cast<std::ptrdiff_t>(slot1), after.end()),
            std::vector<int64_t>(before.begin() + static_cast<std::ptrdiff_t>(slot1), before.end()));
  // A slot used after release.
  const Status used = rh->extend(std::vector<int64_t>{7}, std::vector<RequestRun>{{0, 0, 1}}, one);
  EXPECT_EQ(used.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(used.message().find("slot 0 is free"), std::string::npos) << used.message();
  EXPECT_NE(used.message().find("not used after release"), std::string::npos) << used.message();
  EXPECT_EQ(rh->release(0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(RequestHasher::create(h, 0).status().code(), ErrorCode::kInvalidArgument);
}

// A run's end, begin + count, passed int64 in the bounds message: it
// printed [1, -9223372036854775808) (and was undefined behaviour).
TEST(RequestHasherBadInput, ARunWhoseEndPassesInt64IsNamedWithoutOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<RequestRun> runs{{0, 1, kMax}};
  const Status s = check_request_runs(runs, 4, 2, "extend");
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("covers tokens [1, 1 + 9223372036854775807) but the batch holds 4 tokens"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("-9223372036854775808"), std::string::npos) << s.message();
  const TableHasher h = v41_hasher(0);
  auto rh = RequestHasher::create(h, 1);
  ASSERT_TRUE(rh->begin(0).is_ok());
  std::vector<int64_t> ids(24);
  const Status extended = rh->extend(std::vector<int64_t>{7}, runs, ids);
  EXPECT_NE(extended.message().find("[1, 1 + 9223372036854775807)"), std::string::npos) << extended.message();
  EXPECT_EQ(half_open_range_text(-5, 3), "[-5, -2)");
  EXPECT_EQ(half_open_range_text(std::numeric_limits<int64_t>::min(), -1),
            "[-9223372036854775808, -9223372036854775808 + -1)");
}

}  // namespace
}  // namespace engram
