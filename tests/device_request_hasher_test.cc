// The device request hasher on the emulator (SimDeviceCompute runs the
// kernels' CPU reference on emulated device memory): equal to the CPU
// RequestHasher step by step over 10,000 drawn schedules, eagerly and by
// graphs captured once and replayed across steps (ids, the padding past a
// step, every history after every operation); vLLM's hash-cache replay;
// bad input refused on the host with the CPU hasher's very errors and
// nothing written; a bad token written straight into the device's token
// buffer caught on the device (taken as DEAD there, its own ids DEAD, the
// error read once); and the reference's own error rules.
// ENGRAMLAB_SCHEDULE_SEED=N runs one schedule.
#include "core/lookup/device_request_hasher.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/model/request_hash_words.h"
#include "harness/request_schedule.h"
#include "kernels/request_hash_reference.h"
#include "sim/world.h"
#include "tests/device_hasher_driver.h"

namespace engram {
namespace {

using testing_support::DeviceHasherDriver;
using Mode = DeviceHasherDriver::Mode;

constexpr int kSchedules = 10'000;

sim::WorldSpec one_gpu() {
  sim::WorldSpec spec;
  spec.hosts = sim::plain_hosts("h200-", 1, 1, "H200");
  return spec;
}

const ModelSpec& v41() {
  static const ModelSpec spec = [] {
    auto s = model_preset("deepseek-v4.1-flash");
    EXPECT_TRUE(s.is_ok());
    return *s;
  }();
  return spec;
}

// Small tables of each DEAD rule and lookback depth (order 1 alone: no
// history), and V4.1's two.
std::vector<std::pair<std::string, TableHasher>> hashers() {
  std::vector<std::pair<std::string, TableHasher>> out;
  const std::pair<DeadTokenRule, std::vector<int>> small[] = {{DeadTokenRule::kBarrier, {2, 3}},
                                                               {DeadTokenRule::kBarrierNoRow, {1, 2, 4}},
                                                               {DeadTokenRule::kLiteral, {3}},
                                                               {DeadTokenRule::kBarrier, {1}}};
  for (const auto& [rule, orders] : small) {
    auto spec = make_model_spec("small", 89, {2}, orders, 3, RowFormat::kBf16, 4, 5);
    EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
    spec->compressed_vocab_size = 37;
    spec->pad_id = 2;
    spec->dead_token_rule = rule;
    auto h = TableHasher::create(*spec, 0);
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    out.emplace_back(fmt::format("small {} max order {}", dead_token_rule_name(rule), spec->max_order()), std::move(*h));
  }
  for (int table = 0; table < 2; ++table) out.emplace_back(fmt::format("V4.1 table {}", table), *TableHasher::create(v41(), table));
  return out;
}

void expect_ok_run(const Result<sim::WorldRun>& run) {
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_TRUE(run->all_ok()) << run->summary();
  EXPECT_TRUE(run->leaks.empty()) << run->summary();
}

TEST(DeviceRequestHasherEmulator, EqualsTheCpuHasherOverDrawnSchedulesEagerAndReplayed) {
  const auto all = hashers();
  const char* one = std::getenv("ENGRAMLAB_SCHEDULE_SEED");
  const uint64_t first = one != nullptr ? std::stoull(one) : 1;
  const int count = one != nullptr ? 1 : kSchedules;
  const harness::ScheduleLimits limits;
  int64_t steps = 0, replayed = 0;
  const auto start = std::chrono::steady_clock::now();
  expect_ok_run(sim::run_world(one_gpu(), [&](RankBackend& b) -> Status {
    // Per table and mode, one hasher per instance, reused across schedules
    // (its graphs captured once): slots released between schedules.
    DeviceRequestHasherOptions options;
    options.slot_count = limits.slot_count_max;
    options.tokens_max = 128;
    options.verify_tokens_max = limits.draft_tokens_max + 1;
    std::vector<std::vector<std::vector<std::unique_ptr<DeviceHasherDriver>>>> drivers(all.size());
    for (size_t t = 0; t < all.size(); ++t)
      for (Mode mode : {Mode::kEager, Mode::kGraph}) {
        drivers[t].emplace_back();
        for (int i = 0; i < limits.instance_count_max; ++i) {
          ENGRAM_ASSIGN_OR_RETURN(auto d, DeviceHasherDriver::create(*b.compute, all[t].second, options, mode));
          drivers[t].back().push_back(std::move(d));
        }
      }
    for (int i = 0; i < count; ++i) {
      const uint64_t seed = first + static_cast<uint64_t>(i);
      const size_t t = seed % all.size();
      const size_t mode = (seed / all.size()) % 2;
      const harness::RequestSchedule schedule = harness::draw_request_schedule(all[t].second, seed, limits);
      std::vector<DeviceHasherDriver*> instances;
      for (int k = 0; k < schedule.instance_count; ++k) instances.push_back(drivers[t][mode][static_cast<size_t>(k)].get());
      const Status s = harness::run_request_schedule(schedule, instances);
      if (!s.is_ok())
        return Status(s.code(), fmt::format("{}, {}: {}", all[t].first, mode == 1 ? "graph replay" : "eager", s.message()));
      for (DeviceHasherDriver* d : instances) ENGRAM_RETURN_IF_ERROR(d->release_all());
      steps += static_cast<int64_t>(schedule.steps.size());
      if (mode == 1) replayed += static_cast<int64_t>(schedule.steps.size());
    }
    return Status::ok();
  }));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d schedules on the emulator: %ld steps (%ld by graph replay) in %.2f s\n", count,
              static_cast<long>(steps), static_cast<long>(replayed), seconds);
  if (count == kSchedules) {
    EXPECT_GT(steps, 50'000);
    EXPECT_GT(replayed, 20'000);
  }
}

TEST(DeviceRequestHasherEmulator, VllmHashCacheReplayEagerAndCaptured) {
  expect_ok_run(sim::run_world(one_gpu(), [&](RankBackend& b) -> Status {
    for (int table : {0, 1})  // layers 1 and 14
      for (int64_t query_length : {1, 17, 257})
        for (Mode mode : {Mode::kEager, Mode::kGraph}) {
          const TableHasher h = *TableHasher::create(v41(), table);
          if (h.max_order() != 4 || h.compressed_vocab_size() != 99'092) return internal_error("not V4.1's hashing");
          const Status s = testing_support::vllm_hash_cache_replay(*b.compute, h, query_length, mode);
          if (!s.is_ok())
            return Status(s.code(), fmt::format("table {} query length {} {}: {}", table, query_length,
                                                mode == Mode::kGraph ? "captured" : "eager", s.message()));
        }
    return Status::ok();
  }));
}

// The CPU hasher's refusals, word for word (the driver compares the two
// statuses), plus the device's own bounds; no history changed by any.
TEST(DeviceRequestHasherEmulator, BadInputIsRefusedOnTheHostAsTheCpuHasherRefusesIt) {
  expect_ok_run(sim::run_world(one_gpu(), [&](RankBackend& b) -> Status {
    const TableHasher h = *TableHasher::create(v41(), 0);
    DeviceRequestHasherOptions options;
    options.slot_count = 2;
    options.tokens_max = 4;
    options.verify_tokens_max = 3;
    for (Mode mode : {Mode::kEager, Mode::kGraph}) {
      ENGRAM_ASSIGN_OR_RETURN(auto d, DeviceHasherDriver::create(*b.compute, h, options, mode));
      ENGRAM_RETURN_IF_ERROR(d->begin(0, std::vector<int64_t>{1, 2, 3, 4}));
      ENGRAM_RETURN_IF_ERROR(d->begin(1));
      std::vector<int64_t> ids3(3 * 24), ids1(24), ids2(2 * 24);
      ENGRAM_RETURN_IF_ERROR(d->verify(std::vector<int64_t>{5, 6, 7}, std::vector<RequestRun>{{1, 0, 3}}, ids3));
      ENGRAM_ASSIGN_OR_RETURN(const std::vector<int64_t> before, d->device().read_histories());
      struct Case {
        std::string name;
        Status status;
        std::vector<std::string> words;
      };
      const Case cases[] = {
          {"token outside the vocabulary",
           d->extend(std::vector<int64_t>{7, 99'092}, std::vector<RequestRun>{{0, 0, 2}}, ids2),
           {"request 0", "tokens[1]", "99092", "compressed vocabulary"}},
          {"commit of more drafts than verified", d->commit(std::vector<VerifyCommit>{{1, 3}}),
           {"request 0", "slot 1", "accepted_drafts is 3", "held 2 drafts"}},
          {"a step over the slot count", d->extend(std::vector<int64_t>{7}, std::vector<RequestRun>{{2, 0, 1}}, ids1),
           {"request 0", "runs[0].slot is 2", "slots are 0..1"}},
          {"a slot twice in one batch",
           d->extend(std::vector<int64_t>{7, 8}, std::vector<RequestRun>{{0, 0, 1}, {0, 1, 1}}, ids2),
           {"request 1", "runs[1].slot 0 appears twice"}},
          {"a pending slot extended", d->extend(std::vector<int64_t>{7}, std::vector<RequestRun>{{1, 0, 1}}, ids1),
           {"slot 1 is waiting for commit", "commit its verify block first"}},
          {"begin on a busy slot", d->begin(0), {"slot 0 is active", "release it"}},
          // The device's own bounds (the CPU hasher has none): refused there alone.
          {"a step over tokens_max",
           d->device().stage_extend(std::vector<int64_t>{1, 2, 3, 4, 5}, std::vector<RequestRun>{{0, 0, 5}}),
           {"5 tokens", "at most 4", "tokens_max"}},
      };
      for (const Case& c : cases) {
        if (c.status.code() != ErrorCode::kInvalidArgument)
          return internal_error(fmt::format("{}: {}", c.name, c.status.to_string()));
        for (const std::string& w : c.words)
          if (c.status.message().find(w) == std::string::npos)
            return internal_error(fmt::format("{}: '{}' not in: {}", c.name, w, c.status.message()));
      }
      ENGRAM_ASSIGN_OR_RETURN(const std::vector<int64_t> after, d->device().read_histories());
      if (after != before) return internal_error("a refused step changed a device history");
      // The device's verify blocks are bounded: a longer one is refused there alone.
      ENGRAM_RETURN_IF_ERROR(d->commit(std::vector<VerifyCommit>{{1, 1}}));
      const Status long_block =
          d->device().stage_verify(std::vector<int64_t>{1, 2, 3, 4}, std::vector<RequestRun>{{1, 0, 4}});
      if (long_block.message().find("at most 3 tokens") == std::string::npos ||
          d->device().state(1) != RequestSlots::SlotState::kActive)
        return internal_error("a verify block past verify_tokens_max: " + long_block.to_string());
    }
    return Status::ok();
  }));
}

// The live-buffer path: a producer writes tokens() after the host staged
// the step. A bad token is caught on the device and taken as DEAD there.
TEST(DeviceRequestHasherEmulator, ABadTokenWrittenOnTheDeviceIsTakenAsDeadAndReported) {
  expect_ok_run(sim::run_world(one_gpu(), [&](RankBackend& b) -> Status {
    DeviceCompute& c = *b.compute;
    const TableHasher h = *TableHasher::create(v41(), 1);
    const size_t heads = 24;
    DeviceRequestHasherOptions options;
    options.slot_count = 2;
    options.tokens_max = 8;
    for (bool dead_after : {false, true}) {
      ENGRAM_ASSIGN_OR_RETURN(auto d, DeviceRequestHasher::create(c, h, options));
      ENGRAM_ASSIGN_OR_RETURN(auto graph, c.capture([&](StreamRef s) { return d->enqueue_extend(s, 8); }));
      auto cpu = *RequestHasher::create(h, 2);
      for (RequestHasher* x : {&cpu}) {
        ENGRAM_RETURN_IF_ERROR(x->begin(0, std::vector<int64_t>{11, 12}));
        ENGRAM_RETURN_IF_ERROR(x->begin(1, std::vector<int64_t>{13}));
      }
      ENGRAM_RETURN_IF_ERROR(d->begin(0, std::vector<int64_t>{11, 12}));
      ENGRAM_RETURN_IF_ERROR(d->begin(1, std::vector<int64_t>{13}));
      std::vector<int64_t> staged = {100, 101, 102, dead_after ? kDeadId : 103, 104, 105, 106};
      const std::vector<RequestRun> runs = {{0, 0, 7}};
      ENGRAM_RETURN_IF_ERROR(d->stage_extend(staged, runs));
      const int64_t bad = 99'092 + 5;
      ENGRAM_RETURN_IF_ERROR(c.copy_to_device(d->tokens() + 2 * 8, std::as_bytes(std::span(&bad, 1))));
      ENGRAM_RETURN_IF_ERROR(graph->replay());
      // As if token 2 were DEAD (an image token), its own ids DEAD under every rule.
      staged[2] = kDeadId;
      std::vector<int64_t> want(7 * heads);
      ENGRAM_RETURN_IF_ERROR(cpu.extend(staged, runs, want));
      std::fill_n(want.begin() + 2 * static_cast<int64_t>(heads), heads, kDeadId);
      want.resize(8 * heads, kDeadId);
      std::vector<int64_t> got(8 * heads);
      ENGRAM_RETURN_IF_ERROR(c.copy_to_host(std::as_writable_bytes(std::span(got)), d->row_ids()));
      if (got != want) return internal_error(fmt::format("ids after a bad token (DEAD at 3: {}) differ", dead_after));
      // Steps go on (the error is not sticky); the histories are the CPU's.
      ENGRAM_RETURN_IF_ERROR(d->stage_extend(std::vector<int64_t>{7}, std::vector<RequestRun>{{1, 0, 1}}));
      ENGRAM_RETURN_IF_ERROR(cpu.extend(std::vector<int64_t>{7}, std::vector<RequestRun>{{1, 0, 1}},
                                        std::span(want).first(heads)));
      ENGRAM_RETURN_IF_ERROR(graph->replay());
      ENGRAM_ASSIGN_OR_RETURN(const std::vector<int64_t> histories, d->read_histories());
      std::vector<int64_t> cpu_histories;
      for (int slot : {0, 1}) cpu_histories.insert(cpu_histories.end(), cpu.history(slot).begin(), cpu.history(slot).end());
      if (histories != cpu_histories) return internal_error("the histories differ from the CPU's with the token DEAD");
      const Status caught = d->check_device_errors();
      for (const char* w : {"extend on the device: tokens[2]", "99097", "compressed vocabulary", "took it as DEAD"})
        if (caught.code() != ErrorCode::kInvalidArgument || caught.message().find(w) == std::string::npos)
          return internal_error(fmt::format("'{}' not in: {}", w, caught.to_string()));
      ENGRAM_RETURN_IF_ERROR(d->check_device_errors());  // read once, then clear
      graph.reset();
      ENGRAM_RETURN_IF_ERROR(d->free());
    }
    return Status::ok();
  }));
}

// The reference's own rules (what the kernel is held to): the smallest
// error wins; a bad run is neither hashed nor advanced, the others are;
// extend writes the other history buffer (the rest copied); a commit past
// the block stops the step's commits.
TEST(RequestHashReference, ErrorsAreTheSmallestAndBadWordsAreLeftOut) {
  const TableHasher h = *TableHasher::create(v41(), 0);
  const int slots = 3;
  std::vector<int64_t> histories(2 * slots * 3, 7), pending(slots * 4, 0), counts(slots, 0);
  uint64_t error = kNoDeviceHashError;
  const kernels::RequestStateHost state{slots, 4, histories, pending, counts, &error};
  const std::vector<int64_t> tokens = {1, 2, 3, 99'092, 5, 6};
  std::vector<int64_t> ids(tokens.size() * 24);
  auto runs_of = [&](std::vector<DeviceRunWords> r) {
    r.resize(slots);
    return r;
  };
  auto buffer = [&](int b, int slot) {
    return std::vector<int64_t>(histories.begin() + (b * slots + slot) * 3, histories.begin() + (b * slots + slot + 1) * 3);
  };
  // Run 1 starts inside run 0, and a bad token: the run's error wins; run 0
  // advances (its bad token taken as DEAD: pad after it), run 1 does not,
  // slot 2 is copied.
  kernels::request_hash_reference(h, false, tokens, {2, 0}, runs_of({{0, 0, 4}, {1, 2, 2}}), state, ids);
  EXPECT_EQ(error, device_hash_error(DeviceHashErrorCode::kRun, 1));
  EXPECT_EQ(buffer(1, 0), (std::vector<int64_t>(3, h.pad_id())));
  EXPECT_EQ(buffer(1, 1), (std::vector<int64_t>{7, 7, 7}));
  EXPECT_EQ(buffer(1, 2), (std::vector<int64_t>{7, 7, 7}));
  error = kNoDeviceHashError;
  // A run count past the slots: nothing hashed, every slot copied back (buffer 1 -> 0).
  kernels::request_hash_reference(h, false, tokens, {4, 1}, runs_of({}), state, ids);
  EXPECT_EQ(error, device_hash_error(DeviceHashErrorCode::kRunCount, 0));
  EXPECT_EQ(ids, std::vector<int64_t>(ids.size(), kDeadId));
  EXPECT_EQ(buffer(0, 0), buffer(1, 0));
  error = kNoDeviceHashError;
  // Bad tokens: the first one's index; the step still hashes the rest.
  std::vector<int64_t> two_bad = tokens;
  two_bad[1] = -7;
  kernels::request_hash_reference(h, false, two_bad, {2, 0}, runs_of({{0, 0, 2}, {2, 3, 3}}), state, ids);
  EXPECT_EQ(error, device_hash_error(DeviceHashErrorCode::kToken, 1));
  EXPECT_EQ(std::vector<int64_t>(ids.begin() + 24, ids.begin() + 48), std::vector<int64_t>(24, kDeadId));
  EXPECT_NE(ids[0], kDeadId);
  EXPECT_EQ(buffer(1, 2), (std::vector<int64_t>{6, 5, h.pad_id()}));  // after 99,092 (as DEAD), 5, 6
  error = kNoDeviceHashError;
  // Verify stores a block; one past verify_tokens_max is not stored.
  kernels::request_hash_reference(h, true, tokens, {2, 1}, runs_of({{2, 0, 3}, {1, 3, 3}}), state, ids);
  EXPECT_EQ(error, device_hash_error(DeviceHashErrorCode::kToken, 3));
  EXPECT_EQ(counts[2], 3);
  EXPECT_EQ(counts[1], 3);
  EXPECT_EQ(pending[4 * 1], kDeadId);  // the bad token stored as DEAD
  error = kNoDeviceHashError;
  kernels::request_hash_reference(h, true, std::vector<int64_t>{1, 2, 3, 4, 5}, {1, 1}, runs_of({{0, 0, 5}}), state,
                                  std::span(ids).first(5 * 24));
  EXPECT_EQ(error, device_hash_error(DeviceHashErrorCode::kVerifyBlock, 0));
  EXPECT_EQ(counts[0], 0);
  error = kNoDeviceHashError;
  // Commits past the block held: none applied.
  std::vector<DeviceCommitWords> commits = {{2, 3}, {1, 0}, {}};
  kernels::request_commit_reference(h, {2, 1}, commits, state);
  EXPECT_EQ(error, device_hash_error(DeviceHashErrorCode::kCommit, 0));  // the block held 2 drafts
  EXPECT_EQ(counts[1], 3);
  error = kNoDeviceHashError;
  commits = {{2, 2}, {}, {}};
  kernels::request_commit_reference(h, {1, 1}, commits, state);
  EXPECT_EQ(error, kNoDeviceHashError);
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(buffer(1, 2), (std::vector<int64_t>{3, 2, 1}));
}

}  // namespace
}  // namespace engram
