// The swarm property of `shm clean`: cleaning at any moment of a live job
// never takes a segment the job still needs. Real four-rank jobs (TP2 x DP2,
// host_shared: the writer makes every TP slice, each reader maps its own)
// run while a cleaner sweeps their shm directory over and over from the first
// moment to the last; each job, whatever its seed and step counts, must pass.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "backends/shm/stale_segments.h"
#include "tests/process_run.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";

std::string scenario_text(uint32_t seed, int steps) {
  std::ostringstream yaml;
  yaml << "model: tiny\nhosts:\n  - {name: h200-0, gpus: 4, gpu_model: H200, shm_size: 190GiB}\n"
          "layout: {tp: 2, dp: 2}\nconfig: {cpu_offload: true}\nseed: "
       << seed << "\nlookup:\n  model: tiny\n  batches:\n";
  for (int i = 0; i < steps; ++i) yaml << "    - {tokens: [" << (i % 9) << ", " << (i * 7 % 11) << "]}\n";
  yaml << "expect: {placement: host_shared}\n";
  return yaml.str();
}

TEST(ShmCleanSwarm, CleaningAtAnyMomentOfALiveJobNeverBreaksIt) {
  char shm_templ[] = "/dev/shm/engramlab-cleanswarm-XXXXXX";
  const std::string shm_dir = ::mkdtemp(shm_templ);
  char work_templ[] = "/tmp/engramlab-cleanswarm-XXXXXX";
  const std::string work = ::mkdtemp(work_templ);
  std::mt19937 rng(static_cast<uint32_t>(::getpid()));
  for (int job = 0; job < 4; ++job) {
    const uint32_t seed = rng();
    const int steps = 1 + static_cast<int>(rng() % 40);
    const std::string file = work + "/job" + std::to_string(job) + ".yaml";
    std::ofstream(file) << scenario_text(seed, steps);
    std::atomic<bool> done{false};
    std::atomic<int> sweeps{0};
    std::vector<std::string> removed_while_running;
    const auto pause = std::chrono::microseconds(rng() % 2000);
    std::thread cleaner([&] {
      while (!done.load()) {
        auto removed = shm::remove_stale_segments(shm_dir, shm::SegmentScope::every_job());
        if (removed.is_ok())
          for (const auto& s : *removed) removed_while_running.push_back(s.name + ": " + s.describe());
        ++sweeps;
        std::this_thread::sleep_for(pause);
      }
    });
    const testing::ProcessRun r = testing::run(
        "ENGRAMLAB_SHM_DIR=" + shm_dir + " " + kEngramlab + " launch -n 4 --job-id cleanswarm" + std::to_string(job) +
        " -- " + kEngramlab + " scenario rank " + file);
    done = true;
    cleaner.join();
    EXPECT_EQ(r.exit_code, 0) << "seed " << seed << ", " << steps << " steps, a sweep every " << pause.count()
                              << " us (" << sweeps.load() << " sweeps)\n" << r.output;
    EXPECT_EQ(r.output.find("not_found"), std::string::npos) << r.output;
    EXPECT_EQ(testing::count(r.output, "\"placement\":\"host_shared\""), 4u) << "the job held no segments\n"
                                                                           << r.output;
    // What a sweep may take: only segments nobody mapped any more (the job's
    // own release, before it unlinks them after its last barrier).
    for (const std::string& s : removed_while_running) EXPECT_NE(s.find("no process holds it open"), std::string::npos) << s;
    EXPECT_GT(sweeps.load(), 0);
  }
  fs::remove_all(shm_dir);
  fs::remove_all(work);
}

}  // namespace
}  // namespace engram
