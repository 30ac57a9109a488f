// The device request hasher's CUDA kernels (kernels/request_hash.cu) on a
// GPU: bitwise equal to the CPU RequestHasher over 10,000 drawn schedules,
// eagerly and by graphs captured once and replayed across steps (every id,
// the padding past each step, every history after every operation);
// vLLM's hash-cache replay at V4.1's hashing, eager and captured; and the
// raw kernels equal to their CPU reference (kernels/request_hash_reference.h)
// on random steps of up to 3,000 tokens and 600 runs (past the shared-memory
// run cache), with bad tokens, bad runs and bad commits, from either history
// buffer: the same ids, error word, both history buffers and pending blocks.
#include "core/lookup/device_request_hasher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "backends/cuda/cuda_device_compute.h"
#include "core/model/request_hash_words.h"
#include "harness/request_schedule.h"
#include "kernels/request_hash_reference.h"
#include "tests/device_hasher_driver.h"
#include "tests/gpu/gpu_test_support.h"

namespace engram {
namespace {

using testing_support::DeviceHasherDriver;
using Mode = DeviceHasherDriver::Mode;

const ModelSpec& v41() {
  static const ModelSpec spec = [] {
    auto s = model_preset("deepseek-v4.1-flash");
    EXPECT_TRUE(s.is_ok());
    return *s;
  }();
  return spec;
}

std::vector<TableHasher> hashers() {
  std::vector<TableHasher> out;
  for (DeadTokenRule rule : {DeadTokenRule::kBarrier, DeadTokenRule::kBarrierNoRow, DeadTokenRule::kLiteral}) {
    auto spec = make_model_spec("small", 89, {2}, {1, 2, 4}, 3, RowFormat::kBf16, 4, 5);
    EXPECT_TRUE(spec.is_ok());
    spec->compressed_vocab_size = 37;
    spec->pad_id = 2;
    spec->dead_token_rule = rule;
    out.push_back(*TableHasher::create(*spec, 0));
  }
  out.push_back(*TableHasher::create(v41(), 0));
  out.push_back(*TableHasher::create(v41(), 1));
  return out;
}

TEST(DeviceRequestHasherGpu, EqualsTheCpuHasherOverDrawnSchedulesEagerAndReplayed) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  cuda::CudaDeviceCompute compute(0);
  const auto all = hashers();
  const harness::ScheduleLimits limits;
  DeviceRequestHasherOptions options;
  options.slot_count = limits.slot_count_max;
  options.tokens_max = 128;
  options.verify_tokens_max = limits.draft_tokens_max + 1;
  std::vector<std::vector<std::vector<std::unique_ptr<DeviceHasherDriver>>>> drivers(all.size());
  for (size_t t = 0; t < all.size(); ++t)
    for (Mode mode : {Mode::kEager, Mode::kGraph}) {
      drivers[t].emplace_back();
      for (int i = 0; i < limits.instance_count_max; ++i) {
        auto d = DeviceHasherDriver::create(compute, all[t], options, mode);
        ASSERT_TRUE(d.is_ok()) << d.status().to_string();
        drivers[t].back().push_back(std::move(*d));
      }
    }
  const auto start = std::chrono::steady_clock::now();
  int64_t steps = 0;
  constexpr int kSchedules = 10'000;
  for (uint64_t seed = 1; seed <= kSchedules; ++seed) {
    const size_t t = seed % all.size();
    const size_t mode = (seed / all.size()) % 2;
    const harness::RequestSchedule schedule = harness::draw_request_schedule(all[t], seed, limits);
    std::vector<DeviceHasherDriver*> instances;
    for (int k = 0; k < schedule.instance_count; ++k) instances.push_back(drivers[t][mode][static_cast<size_t>(k)].get());
    const Status s = harness::run_request_schedule(schedule, instances);
    ASSERT_TRUE(s.is_ok()) << "table " << t << (mode == 1 ? " graph replay: " : " eager: ") << s.to_string();
    for (DeviceHasherDriver* d : instances) ENGRAM_STATUS_OK(d->release_all());
    steps += static_cast<int64_t>(schedule.steps.size());
  }
  std::printf("%d schedules on GPU 0: %ld steps in %.1f s\n", kSchedules, static_cast<long>(steps),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

TEST(DeviceRequestHasherGpu, VllmHashCacheReplayEagerAndCaptured) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  cuda::CudaDeviceCompute compute(0);
  for (int table : {0, 1})  // layers 1 and 14
    for (int64_t query_length : {1, 17, 257})
      for (Mode mode : {Mode::kEager, Mode::kGraph}) {
        const TableHasher h = *TableHasher::create(v41(), table);
        ASSERT_EQ(h.max_order(), 4);
        ASSERT_EQ(h.compressed_vocab_size(), 99'092);
        ENGRAM_STATUS_OK(testing_support::vllm_hash_cache_replay(compute, h, query_length, mode));
      }
}

// One random device step (extend, verify or commit), on the GPU and on the
// reference, from the same state.
TEST(DeviceRequestHasherGpu, KernelsEqualTheirCpuReferenceOnGoodAndBadSteps) {
  ENGRAM_SKIP_WITHOUT_GPUS(1);
  cuda::CudaDeviceCompute c(0);
  std::mt19937_64 rng(17);
  const auto all = hashers();
  int errors_seen[8] = {};
  for (int round = 0; round < 400; ++round) {
    const TableHasher& h = all[static_cast<size_t>(round) % all.size()];
    const int slots = round % 7 == 0 ? 600 : 1 + static_cast<int>(rng() % 40);
    const int64_t vtm = 1 + static_cast<int64_t>(rng() % 6);
    const int64_t token_count = round % 11 == 0 ? 3000 : static_cast<int64_t>(rng() % 300);
    const size_t length = static_cast<size_t>(h.history_length()), heads = static_cast<size_t>(h.head_count());
    const int64_t vocab = h.compressed_vocab_size();
    auto id = [&] {
      const uint64_t d = rng() % 100;
      return d < 8 ? kDeadId : static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
    };
    // A state as steps leave it: histories of ids (pad behind a barrier), some pending blocks.
    // Both history buffers filled, so a word copied from the wrong one shows.
    std::vector<int64_t> histories(2 * static_cast<size_t>(slots) * length), pending(static_cast<size_t>(slots * vtm), 0),
        counts(static_cast<size_t>(slots), 0);
    for (int s = 0; s < 2 * slots; ++s) {
      std::vector<int64_t> hist = h.empty_history(), seq;
      for (int k = 0; k < 4; ++k) seq.push_back(id());
      h.advance(hist, seq);
      std::copy(hist.begin(), hist.end(), histories.begin() + static_cast<std::ptrdiff_t>(s * length));
    }
    for (int s = 0; s < slots; ++s) {
      if (rng() % 2 == 0) {
        counts[static_cast<size_t>(s)] = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(vtm));
        for (int64_t k = 0; k < counts[static_cast<size_t>(s)]; ++k) pending[static_cast<size_t>(s * vtm + k)] = id();
      }
    }
    std::vector<int64_t> tokens(static_cast<size_t>(token_count));
    for (int64_t& v : tokens) v = id();
    const int kind = static_cast<int>(rng() % 3);  // extend, verify, commit
    const bool bad_token = rng() % 4 == 0, bad_run = rng() % 6 == 0;
    if (bad_token && token_count > 0) tokens[rng() % tokens.size()] = rng() % 2 ? vocab + 3 : -5;
    // Runs: distinct slots, sorted, disjoint, gaps between (padding).
    std::vector<DeviceRunWords> runs(static_cast<size_t>(slots));
    std::vector<int> order(static_cast<size_t>(slots));
    for (int s = 0; s < slots; ++s) order[static_cast<size_t>(s)] = s;
    std::shuffle(order.begin(), order.end(), rng);
    int64_t run_count = 0, at = 0;
    while (run_count < slots && at < token_count) {
      at += static_cast<int64_t>(rng() % 3);
      const int64_t n = 1 + static_cast<int64_t>(rng() % (kind == 1 ? static_cast<uint64_t>(vtm) + (rng() % 8 == 0) : 9));
      if (at + n > token_count) break;
      runs[static_cast<size_t>(run_count)] = {order[static_cast<size_t>(run_count)], at, n};
      ++run_count;
      at += n;
    }
    if (bad_run && run_count > 1) std::swap(runs[0], runs[static_cast<size_t>(run_count) - 1]);
    if (bad_run && run_count <= 1) run_count = slots + 1;
    std::vector<DeviceCommitWords> commits(static_cast<size_t>(slots));
    int64_t commit_count = 0;
    for (int s = 0; s < slots; ++s)
      if (counts[static_cast<size_t>(s)] > 0 && rng() % 2 == 0)
        commits[static_cast<size_t>(commit_count++)] = {s, static_cast<int64_t>(rng() % static_cast<uint64_t>(counts[static_cast<size_t>(s)]))};
    if (bad_run && commit_count > 0) commits[0].accepted_drafts = counts[static_cast<size_t>(commits[0].slot)];
    // An error left from an earlier step: the step goes on, the word keeps the smaller.
    const uint64_t earlier = rng() % 10 == 0 ? device_hash_error(DeviceHashErrorCode::kToken, 3) : kNoDeviceHashError;
    const int64_t buffer = static_cast<int64_t>(rng() % 2);

    // The device copy.
    auto upload = [&](const auto& v) {
      auto p = c.allocate(std::max<uint64_t>(v.size() * sizeof(v[0]), 8));
      EXPECT_TRUE(p.is_ok());
      if (!v.empty()) {
        EXPECT_TRUE(c.copy_to_device(*p, std::as_bytes(std::span(v))).is_ok());
      }
      return *p;
    };
    const std::vector<DeviceHashHead> head_words = device_hash_heads(h);
    const std::vector<uint64_t> error_word = {earlier};
    const std::vector<int64_t> run_header = {run_count, buffer}, commit_header = {commit_count, buffer};
    DeviceRequestState st;
    st.hasher = &h;
    st.heads = upload(head_words);
    st.slot_count = slots;
    st.histories = upload(histories);
    st.verify_tokens_max = vtm;
    st.pending = upload(pending);
    st.pending_counts = upload(counts);
    st.error = upload(error_word);
    const DevicePtr tokens_d = upload(tokens), runs_d = upload(runs), run_header_d = upload(run_header),
                    commits_d = upload(commits), commit_header_d = upload(commit_header);
    const DevicePtr ids_d = c.allocate(std::max<uint64_t>(tokens.size() * heads * 8, 8)).value();
    if (kind == 2) {
      ENGRAM_STATUS_OK(c.commit_requests(DeviceRequestCommit{st, commit_header_d, commits_d}, {}));
    } else {
      ENGRAM_STATUS_OK(c.hash_requests(DeviceRequestHash{st, kind == 1, tokens_d, token_count, run_header_d, runs_d, ids_d}, {}));
    }
    ENGRAM_STATUS_OK(c.synchronize({}));

    // The reference.
    uint64_t error = earlier;
    const int64_t header[2] = {run_count, buffer};
    std::vector<int64_t> ids(tokens.size() * heads);
    kernels::RequestStateHost host{slots, vtm, histories, pending, counts, &error};
    if (kind == 2) kernels::request_commit_reference(h, {commit_count, buffer}, commits, host);
    else kernels::request_hash_reference(h, kind == 1, tokens, header, runs, host, ids);

    auto download = [&](DevicePtr p, auto& out) { ENGRAM_STATUS_OK(c.copy_to_host(std::as_writable_bytes(std::span(out)), p)); };
    std::vector<int64_t> got_histories(histories.size()), got_pending(pending.size()), got_counts(counts.size()),
        got_ids(ids.size());
    std::vector<uint64_t> got_error(1);
    download(st.histories, got_histories);
    download(st.pending, got_pending);
    download(st.pending_counts, got_counts);
    download(st.error, got_error);
    if (!ids.empty()) download(ids_d, got_ids);
    SCOPED_TRACE(fmt::format("round {}: kind {}, {} slots, {} tokens, {} runs, bad token {}, bad run {}", round, kind,
                             slots, token_count, run_count, bad_token, bad_run));
    EXPECT_EQ(got_error[0], error);
    EXPECT_EQ(got_histories, histories);
    EXPECT_EQ(got_pending, pending);
    EXPECT_EQ(got_counts, counts);
    const auto code = device_hash_error_code(error);
    // Ids are specified unless a run (or the run count) was bad.
    const bool ids_specified = kind != 2 && (error == kNoDeviceHashError ||
                                             (code != DeviceHashErrorCode::kRun && code != DeviceHashErrorCode::kRunCount));
    if (ids_specified) {
      EXPECT_EQ(got_ids, ids);
    }
    if (error != kNoDeviceHashError) ++errors_seen[static_cast<int>(code)];
    for (DevicePtr p : {st.heads, st.histories, st.pending, st.pending_counts, st.error, tokens_d, runs_d, run_header_d,
                        commits_d, commit_header_d, ids_d})
      ENGRAM_STATUS_OK(c.free(p));
    if (HasFailure()) break;
  }
  // Every kind of error was reached.
  for (DeviceHashErrorCode code : {DeviceHashErrorCode::kRunCount, DeviceHashErrorCode::kRun, DeviceHashErrorCode::kToken,
                                   DeviceHashErrorCode::kVerifyBlock, DeviceHashErrorCode::kCommit})
    EXPECT_GT(errors_seen[static_cast<int>(code)], 0) << "error code " << static_cast<int>(code);
}

}  // namespace
}  // namespace engram
