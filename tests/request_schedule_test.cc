// The request-state hasher over drawn schedules: whatever way a sequence is
// cut (chunks, decode tokens, cached prefixes, lookback handovers, CP shards
// after their halo, verify blocks with rejected drafts, idle slots and
// padding), every step's ids equal those of hashing the accepted sequence
// whole. ENGRAMLAB_SCHEDULE_SEED=N runs one seed (the failure message's line).
#include "harness/request_schedule.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/model/hashing.h"
#include "core/model/request_hasher.h"
#include "core/model/table_spec.h"

namespace engram::harness {
namespace {

constexpr int kSchedules = 10'000;

// Small tables of each DEAD rule and lookback depth, and V4.1's (orders 2-4,
// 24 heads, compressed vocabulary 99,092, both layers).
std::vector<std::pair<std::string, TableHasher>> hashers() {
  std::vector<std::pair<std::string, TableHasher>> out;
  const std::pair<DeadTokenRule, std::vector<int>> small[] = {
      {DeadTokenRule::kBarrier, {2, 3, 4}}, {DeadTokenRule::kBarrierNoRow, {1, 3}},
      {DeadTokenRule::kLiteral, {2, 5}},    {DeadTokenRule::kBarrier, {1}}};
  for (const auto& [rule, orders] : small) {
    auto spec = make_model_spec("small", 97, {1}, orders, 2, RowFormat::kBf16, 4, 7);
    EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
    spec->compressed_vocab_size = 41;
    spec->pad_id = 3;
    spec->dead_token_rule = rule;
    EXPECT_TRUE(validate(*spec).is_ok());
    auto h = TableHasher::create(*spec, 0);
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    out.emplace_back(fmt::format("small {} max order {}", dead_token_rule_name(rule), spec->max_order()), std::move(*h));
  }
  auto v41 = model_preset("deepseek-v4.1-flash");
  EXPECT_TRUE(v41.is_ok());
  for (int table = 0; table < 2; ++table) {
    auto h = TableHasher::create(*v41, table);
    EXPECT_TRUE(h.is_ok());
    out.emplace_back(fmt::format("V4.1 table {}", table), std::move(*h));
  }
  return out;
}

Status run_cpu(const RequestSchedule& schedule, const TableHasher& hasher) {
  std::vector<RequestHasher> instances;
  for (int i = 0; i < schedule.instance_count; ++i) {
    auto h = RequestHasher::create(hasher, schedule.slot_count);
    ENGRAM_CHECK(h.is_ok());
    instances.push_back(std::move(*h));
  }
  std::vector<RequestHasher*> ptrs;
  for (RequestHasher& h : instances) ptrs.push_back(&h);
  return run_request_schedule(schedule, ptrs);
}

TEST(RequestSchedule, EveryCutHashesAsTheAcceptedSequenceWhole) {
  const auto all = hashers();
  const char* one = std::getenv("ENGRAMLAB_SCHEDULE_SEED");
  const uint64_t first = one != nullptr ? std::stoull(one) : 1;
  const int count = one != nullptr ? 1 : kSchedules;
  int64_t steps = 0, cp_shards = 0, verifies = 0, handovers = 0, tokens = 0, prefix_begins = 0, padded = 0;
  for (int i = 0; i < count; ++i) {
    const uint64_t seed = first + static_cast<uint64_t>(i);
    const auto& [name, hasher] = all[seed % all.size()];
    const RequestSchedule schedule = draw_request_schedule(hasher, seed);
    const Status s = run_cpu(schedule, hasher);
    ASSERT_TRUE(s.is_ok()) << name << ": " << s.to_string();
    steps += static_cast<int64_t>(schedule.steps.size());
    for (const ScheduleStep& step : schedule.steps) {
      cp_shards += step.what.find("cp shard") != std::string::npos && step.op == ScheduleOp::kExtend;
      verifies += step.op == ScheduleOp::kVerify;
      handovers += step.what.find("lookback") != std::string::npos;
      prefix_begins += step.what.find("cached prefix") != std::string::npos;
      padded += step.what == "fully padded";
      for (const RequestRun& run : step.runs) tokens += run.slot == kIdleSlot ? 0 : run.token_count;
    }
  }
  // The draws reach every kind of cut (a generator that stopped drawing one
  // would pass the property vacuously).
  if (count == kSchedules) {
    EXPECT_GT(steps, 50'000);
    EXPECT_GT(cp_shards, 1'000);
    EXPECT_GT(verifies, 1'000);
    EXPECT_GT(handovers, 1'000);
    EXPECT_GT(prefix_begins, 1'000);
    EXPECT_GT(padded, 1'000);
    EXPECT_GT(tokens, 100'000);
  }
  std::printf("%d schedules: %ld steps, %ld request tokens hashed, %ld cp shards, %ld verify blocks, %ld handovers, "
              "%ld cached-prefix begins, %ld fully padded steps\n",
              count, static_cast<long>(steps), static_cast<long>(tokens), static_cast<long>(cp_shards),
              static_cast<long>(verifies), static_cast<long>(handovers), static_cast<long>(prefix_begins),
              static_cast<long>(padded));
}

TEST(RequestSchedule, SameSeedSameSchedule) {
  const auto all = hashers();
  for (uint64_t seed : {1u, 77u, 4096u}) {
    const RequestSchedule a = draw_request_schedule(all[5].second, seed);
    const RequestSchedule b = draw_request_schedule(all[5].second, seed);
    ASSERT_EQ(a.steps.size(), b.steps.size());
    for (size_t i = 0; i < a.steps.size(); ++i) {
      EXPECT_EQ(a.steps[i].tokens, b.steps[i].tokens);
      EXPECT_EQ(a.steps[i].expected_row_ids, b.steps[i].expected_row_ids);
      EXPECT_EQ(a.steps[i].preceding_ids, b.steps[i].preceding_ids);
    }
    EXPECT_EQ(a.accepted_sequences, b.accepted_sequences);
  }
}

// Negative controls: hashers that get one cut wrong fail the property, each
// with a message naming the seed, step, token and head.
class ForgetfulHasher {
 public:
  enum class Flaw { kIgnoresPrecedingIds, kCommitsRejectedDrafts };
  ForgetfulHasher(RequestHasher inner, Flaw flaw) : inner_(std::move(inner)), flaw_(flaw) {}
  Status begin(int slot, std::span<const int64_t> preceding) {
    return flaw_ == Flaw::kIgnoresPrecedingIds ? inner_.begin(slot) : inner_.begin(slot, preceding);
  }
  Status extend(std::span<const int64_t> t, std::span<const RequestRun> r, std::span<int64_t> ids) {
    return inner_.extend(t, r, ids);
  }
  Status verify(std::span<const int64_t> t, std::span<const RequestRun> r, std::span<int64_t> ids) {
    return inner_.verify(t, r, ids);
  }
  Status commit(std::span<const VerifyCommit> commits) {
    if (flaw_ != Flaw::kCommitsRejectedDrafts) return inner_.commit(commits);
    std::vector<VerifyCommit> all(commits.begin(), commits.end());
    for (VerifyCommit& c : all)
      c.accepted_drafts = static_cast<int64_t>(inner_.pending_block(c.slot).size()) - 1;
    return inner_.commit(all);
  }
  Status release(int slot) { return inner_.release(slot); }

 private:
  RequestHasher inner_;
  Flaw flaw_;
};

TEST(RequestSchedule, AHasherThatGetsOneCutWrongFails) {
  const auto all = hashers();
  const TableHasher& v41 = all[4].second;
  for (ForgetfulHasher::Flaw flaw : {ForgetfulHasher::Flaw::kIgnoresPrecedingIds, ForgetfulHasher::Flaw::kCommitsRejectedDrafts}) {
    int failed = 0;
    std::string message;
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      const RequestSchedule schedule = draw_request_schedule(v41, seed);
      std::vector<ForgetfulHasher> instances;
      for (int i = 0; i < schedule.instance_count; ++i)
        instances.emplace_back(*RequestHasher::create(v41, schedule.slot_count), flaw);
      std::vector<ForgetfulHasher*> ptrs;
      for (ForgetfulHasher& h : instances) ptrs.push_back(&h);
      const Status s = run_request_schedule(schedule, ptrs);
      if (!s.is_ok()) {
        ++failed;
        message = s.message();
      }
    }
    EXPECT_GT(failed, 20) << "flaw " << static_cast<int>(flaw);
    EXPECT_NE(message.find("expected"), std::string::npos) << message;
    EXPECT_NE(message.find("ENGRAMLAB_SCHEDULE_SEED="), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace engram::harness
