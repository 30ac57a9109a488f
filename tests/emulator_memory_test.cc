// The emulator's memory estimate (harness/emulator_memory.h): an upper bound
// of what a run adds to this process's peak RSS, linear in ranks, and a run
// that exceeds the limit is refused before anything is allocated.
#include "harness/emulator_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "harness/emulated_scenario.h"
#include "sim/world.h"
#include "tests/sanitizer_build.h"

namespace engram::sim {
namespace {

using ::testing::HasSubstr;

// VmRSS or VmHWM of this process, in bytes.
uint64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  return 0;
}

// Resets VmHWM to the current RSS (Linux 4.0 and later); false where it cannot.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// As benchmarks/emulator_scale_benchmark table 5: every rank its own one-GPU
// host, DP = ranks, `tokens` a rank.
harness::EmulatedJob one_gpu_hosts_job(int ranks, int tokens) {
  harness::EmulatedJob job;
  job.deployment.hosts = plain_hosts("h", ranks, 1, "H200");
  for (auto& h : job.deployment.hosts) h.tmpfs_bytes_total = 512ull << 30;
  job.deployment.layout = ParallelLayout{1, ranks};
  job.deployment.config.tokens_per_rank_max = tokens;
  job.lookup.tokens = tokens;
  job.seed = 42;
  job.memory_limit = harness::MemoryLimit{uint64_t{1} << 50, "the test"};
  return job;
}

TEST(EmulatorMemory, EstimateBoundsTheMeasuredPeakAt4096Tokens) {
  ENGRAM_SKIP_UNDER_SANITIZERS("ASan pads and quarantines allocations, so the measured peak is not the release figure the estimate bounds");
  for (int ranks : {8, 16}) {
    SCOPED_TRACE(ranks);
    const harness::EmulatedJob job = one_gpu_hosts_job(ranks, 4096);
    if (!reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the peak RSS here";
    const uint64_t before = status_bytes("VmRSS");
    const harness::EmulatedOutcome out = run_emulated_job(job);
    const uint64_t added = status_bytes("VmHWM") - before;
    ASSERT_FALSE(out.error) << out.error->to_string();
    EXPECT_EQ(harness::placement_summary(out), "device_collective");
    const harness::EmulatorMemoryEstimate& e = out.memory_estimate;
    EXPECT_EQ(e.ranks, ranks);
    EXPECT_EQ(e.lookup_tokens, 4096);
    // An upper bound, and not a wild one (measured 1.35-1.6x here).
    EXPECT_GE(e.total_bytes, added) << "estimate " << e.total_bytes << ", measured " << added;
    EXPECT_LE(e.total_bytes, 3 * added) << "estimate " << e.total_bytes << ", measured " << added;
  }
}

struct Measured {
  uint64_t estimate_bytes = 0;
  uint64_t added_bytes = 0;  // peak RSS less the RSS before the run
  bool ok = false;
};

// Runs `job` in a forked child, so its peak RSS is its own (nothing the test
// process allocated before can hide in it): the child resets its VmHWM,
// runs, and sends back the estimate and what the run added.
Measured measure_in_a_child(const harness::EmulatedJob& job) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    Measured m;
    // The parent's freed heap would serve the run without raising the RSS.
    ::malloc_trim(0);
    if (reset_peak_rss()) {
      const uint64_t before = status_bytes("VmRSS");
      const harness::EmulatedOutcome out = run_emulated_job(job);
      m.added_bytes = status_bytes("VmHWM") - before;
      m.estimate_bytes = out.memory_estimate.total_bytes;
      m.ok = !out.error;
    }
    const bool sent = ::write(fds[1], &m, sizeof m) == static_cast<ssize_t>(sizeof m);
    ::_exit(sent ? 0 : 1);
  }
  ::close(fds[1]);
  Measured m;
  const bool got = pid > 0 && ::read(fds[0], &m, sizeof m) == static_cast<ssize_t>(sizeof m);
  ::close(fds[0]);
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  if (!got) m.ok = false;
  return m;
}

// A few tokens on 8-GPU hosts (device_collective, ranks sharing a host):
// the estimate was 25x the run (3,456 ranks: 7.5 GiB against 297 MiB), so it
// refused runs that fit. Held within 2x of the measured peak, and above it,
// at three sizes.
TEST(EmulatorMemory, EstimateIsWithinTwiceTheMeasuredPeakAtThreeSizes) {
  ENGRAM_SKIP_UNDER_SANITIZERS("ASan pads and quarantines allocations, so the measured peak is not the release figure the estimate bounds");
  for (int hosts : {16, 64, 256}) {
    harness::EmulatedJob job;
    job.deployment.hosts = plain_hosts("h", hosts, 8, "H200");
    job.deployment.layout = ParallelLayout{1, hosts * 8};
    job.deployment.config.tokens_per_rank_max = 64;
    job.lookup.tokens = 4;
    job.seed = 42;
    job.memory_limit = harness::MemoryLimit{uint64_t{1} << 50, "the test"};
    const Measured m = measure_in_a_child(job);
    ASSERT_TRUE(m.ok) << hosts * 8 << " ranks: the child's run failed, or its peak could not be reset";
    std::printf("%d ranks: estimate %.1f MiB, measured %.1f MiB (%.2fx)\n", hosts * 8,
                static_cast<double>(m.estimate_bytes) / (1 << 20), static_cast<double>(m.added_bytes) / (1 << 20),
                static_cast<double>(m.estimate_bytes) / static_cast<double>(m.added_bytes));
    EXPECT_GE(m.estimate_bytes, m.added_bytes) << hosts * 8 << " ranks";
    EXPECT_LE(m.estimate_bytes, 2 * m.added_bytes) << hosts * 8 << " ranks";
  }
}

// cp_prefill {tokens: 1, split: every} over P CP ranks is P ops of P
// shards: compiled once a rank it grew as P^2.6 (512 ranks: 3.7 GiB). Compiled
// once for the run, the estimate bounds it and the growth from 128 to 256
// ranks stays below P^2's 4x (measured 13.1 -> 41.5 MiB, 3.2x; P^2.6 is 6x).
TEST(EmulatorMemory, EverySplitOverManyCpRanksStaysBounded) {
  ENGRAM_SKIP_UNDER_SANITIZERS("ASan pads and quarantines allocations, so the measured peak is not the release figure the estimate bounds");
  auto job_of = [](int ranks) {
    harness::EmulatedJob job;
    job.deployment.hosts = plain_hosts("h", ranks / 8, 8, "H200");
    job.deployment.layout = ParallelLayout{1, ranks};
    job.deployment.layout.prefill_cp = ranks;
    job.seed = 1;
    job.lookup.steps.requests = {harness::StepsRequest{0, 0}};
    harness::StepSpec step;
    step.kind = harness::StepKind::kCpPrefill;
    step.every_split_tokens = 1;
    job.lookup.steps.steps = {step};
    job.memory_limit = harness::MemoryLimit{uint64_t{1} << 50, "the test"};
    return job;
  };
  const Measured small = measure_in_a_child(job_of(128)), large = measure_in_a_child(job_of(256));
  ASSERT_TRUE(small.ok && large.ok);
  std::printf("128 / 256 CP ranks: measured %.1f / %.1f MiB, estimate %.1f / %.1f MiB\n",
              static_cast<double>(small.added_bytes) / (1 << 20), static_cast<double>(large.added_bytes) / (1 << 20),
              static_cast<double>(small.estimate_bytes) / (1 << 20), static_cast<double>(large.estimate_bytes) / (1 << 20));
  EXPECT_GE(small.estimate_bytes, small.added_bytes);
  EXPECT_GE(large.estimate_bytes, large.added_bytes);
  EXPECT_LT(large.added_bytes, 4 * small.added_bytes);
}

TEST(EmulatorMemory, EstimateGrowsLinearlyInRanks) {
  const ModelSpec model = model_preset("tiny").value();
  auto estimate = [&](int ranks, bool device_collective) {
    Deployment d = one_gpu_hosts_job(ranks, 4096).deployment;
    for (int r = 0; r < ranks; ++r) d.rank_hosts.push_back(r);
    harness::ScenarioLookup lookup;
    lookup.tokens = 4096;
    return harness::estimate_emulator_memory(d, model, lookup, device_collective);
  };
  for (bool collective : {true, false}) {
    SCOPED_TRACE(collective);
    const harness::EmulatorMemoryEstimate e64 = estimate(64, collective), e1024 = estimate(1024, collective),
                                 e8192 = estimate(8192, collective);
    EXPECT_EQ(e64.per_rank_bytes, e1024.per_rank_bytes);
    EXPECT_EQ(e1024.per_rank_bytes, e8192.per_rank_bytes);
    EXPECT_EQ(e8192.total_bytes - e8192.fixed_bytes, 8 * (e1024.total_bytes - e1024.fixed_bytes));
  }
  // device_collective at 4,096 tokens: the issue's measured ~47 MB a rank, bounded.
  const harness::EmulatorMemoryEstimate e = estimate(1024, true);
  EXPECT_GE(e.per_rank_bytes, uint64_t{47'000'000});
  EXPECT_LE(e.per_rank_bytes, uint64_t{94'000'000});
  // Fewer tokens, less memory.
  Deployment d = one_gpu_hosts_job(64, 256).deployment;
  for (int r = 0; r < 64; ++r) d.rank_hosts.push_back(r);
  harness::ScenarioLookup small;
  small.tokens = 256;
  EXPECT_LT(harness::estimate_emulator_memory(d, model, small, true).per_rank_bytes, e.per_rank_bytes / 8);
}

TEST(EmulatorMemory, RefusesARunOverTheLimitBeforeAllocating) {
  harness::EmulatedJob job = one_gpu_hosts_job(1024, 4096);
  job.memory_limit = harness::MemoryLimit{uint64_t{1} << 30, "the test's injected limit"};
  reset_peak_rss();  // where it cannot, the peak so far only loosens the check
  const uint64_t before = status_bytes("VmRSS");
  const harness::EmulatedOutcome out = run_emulated_job(job);
  const uint64_t peak = status_bytes("VmHWM");
  ASSERT_TRUE(out.error);
  EXPECT_TRUE(out.emulator_refused);
  EXPECT_EQ(out.error->code(), ErrorCode::kResourceExhausted);
  const std::string text = out.error->to_string();
  EXPECT_THAT(text, HasSubstr("needs an estimated"));
  EXPECT_THAT(text, HasSubstr("a rank x 1024 ranks at 4096 lookup tokens"));
  EXPECT_THAT(text, HasSubstr("1.000 GiB"));
  EXPECT_THAT(text, HasSubstr("the test's injected limit"));
  EXPECT_THAT(text, HasSubstr("fewer ranks or fewer lookup tokens"));
  EXPECT_GT(out.memory_estimate.total_bytes, uint64_t{40} << 30);  // ~60 MiB a rank
  EXPECT_TRUE(out.ranks.empty());  // no rank was started
  // Plan ran (1,024 hosts); nothing of the run's ~60 GiB was allocated.
  EXPECT_LT(peak - std::min(peak, before), uint64_t{64} << 20) << "peak RSS rose " << (peak - before) << " bytes";
}

// scenario run reports the refusal as a failed case with its error, not an abort.
TEST(EmulatorMemory, ScenarioOverTheLimitIsAFailedCase) {
  auto scenario = harness::parse_scenario_text(R"(
description: 1,024 one-GPU hosts at 4,096 lookup tokens a rank
hosts:
  - {name: h, count: 1024, gpus: 1, gpu_model: H200, shm_size: 512GiB}
layout: {tp: 1, dp: 1024}
config: {tokens_per_rank_max: 4096}
lookup: {tokens: 4096}
expect:
  placement: device_collective
)",
                                      "big_lookup.yaml");
  ASSERT_TRUE(scenario.is_ok()) << scenario.status().to_string();
  const harness::ScenarioOutcome out =
      run_scenario(scenario.value(), std::nullopt, nullptr, harness::MemoryLimit{uint64_t{2} << 30, "the test's injected limit"});
  EXPECT_FALSE(out.passed);
  EXPECT_EQ(out.error_kind, "resource_exhausted");
  ASSERT_FALSE(out.failures.empty());
  EXPECT_THAT(out.failures.front(), HasSubstr("needs an estimated"));
  EXPECT_THAT(out.error_text, HasSubstr("the test's injected limit"));
}

TEST(EmulatorMemory, MachineLimitNamesItsSource) {
  const auto limit = harness::machine_memory_limit();
  ASSERT_TRUE(limit.has_value()) << "no MemAvailable in /proc/meminfo";
  EXPECT_GT(limit->bytes, 0u);
  EXPECT_FALSE(limit->source.empty());
}

}  // namespace
}  // namespace engram::sim
