// Every size a fix text asks the user to set parses back, with our own
// parser in the context of the tool that reads it (Docker, a tmpfs mount,
// systemd: K/M/G/T are powers of 1024; Kubernetes quantities: G is 10^9, Gi
// 2^30; our own fields and flags), to at least the size it asks room for:
// the /dev/shm fixes of the fallback warnings and the strict error, the
// memory fit's limit and sizeLimit fixes, the emulator's ENOSPC, and the
// namespace line `scenario run --real` offers. A scan of the sources makes
// sure no fix with a size is printed from a file these cases do not cover.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/units.h"
#include "core/deployment_file/deployment_yaml.h"
#include "core/plan/config_resolution.h"
#include "core/plan/memory_fit.h"
#include "core/plan/placement_rules.h"
#include "core/plan/shm_fix.h"
#include "sim/world.h"
#include "tests/deployment_fixtures.h"
#include "tests/process_run.h"

namespace engram {
namespace {

using ::testing::HasSubstr;

struct Context {
  const char* name;
  std::regex pattern;  // one group: the size as printed
  SizeUnits units;
};

const std::vector<Context>& contexts() {
  static const std::vector<Context> all = {
      {"docker --shm-size", std::regex(R"(--shm-size=([0-9.]+[a-zA-Z]+))"), SizeUnits::kBinaryLetters},
      {"docker --memory", std::regex(R"(--memory=([0-9.]+[a-zA-Z]+))"), SizeUnits::kBinaryLetters},
      {"tmpfs remount size=", std::regex(R"(remount,size=([0-9.]+[a-zA-Z]+))"), SizeUnits::kBinaryLetters},
      {"tmpfs mount -o size=", std::regex(R"(tmpfs -o size=([0-9.]+[a-zA-Z]+))"), SizeUnits::kBinaryLetters},
      {"systemd MemoryMax=", std::regex(R"(MemoryMax=([0-9.]+[a-zA-Z]+))"), SizeUnits::kBinaryLetters},
      {"Kubernetes sizeLimit", std::regex(R"(sizeLimit: ([0-9.]+[a-zA-Z]+))"), SizeUnits::kKubernetes},
      {"Kubernetes limits.memory", std::regex(R"(limits\.memory: ([0-9.]+[a-zA-Z]+))"), SizeUnits::kKubernetes},
      {"our shm_size_limit (a Kubernetes quantity)", std::regex(R"(shm_size_limit: ([0-9.]+[a-zA-Z]+))"),
       SizeUnits::kKubernetes},
      {"our --shm-size-limit (a Kubernetes quantity)", std::regex(R"(--shm-size-limit ([0-9.]+[a-zA-Z]+))"),
       SizeUnits::kKubernetes},
      {"our memory_limit fields", std::regex(R"(memory_limit(?:_per_rank)?: ([0-9.]+[a-zA-Z]+))"),
       SizeUnits::kBinaryLetters},
      {"our --memory-limit flags", std::regex(R"(--memory-limit(?:-per-rank)? ([0-9.]+[a-zA-Z]+))"),
       SizeUnits::kBinaryLetters},
  };
  return all;
}

// Checks every size in `text` against `asked_bytes`; returns the contexts seen.
std::set<std::string> check_fixes(const std::string& text, uint64_t asked_bytes) {
  std::set<std::string> seen;
  for (const Context& c : contexts()) {
    for (std::sregex_iterator it(text.begin(), text.end(), c.pattern), end; it != end; ++it) {
      const std::string value = (*it)[1].str();
      auto bytes = parse_bytes(value, c.name, c.units);
      if (!bytes.is_ok()) {
        ADD_FAILURE() << c.name << ": '" << value << "' does not parse: " << bytes.status().to_string() << "\n" << text;
        continue;
      }
      EXPECT_GE(bytes.value(), asked_bytes) << c.name << ": '" << value << "' is less than the " << asked_bytes
                                            << " bytes asked for\n" << text;
      seen.insert(c.name);
    }
  }
  EXPECT_FALSE(seen.empty()) << "no fix with a size in:\n" << text;
  return seen;
}

// Table sizes, some whole GiB and some not (a fix rounds up).
const std::vector<uint64_t> kAsked = {testing::kFlashTableBytesTotal, 101'377'628'352ull, 64 * kMiB + 1,
                                      10'187'264ull, 1 * kGiB, 190 * kGiB};

std::set<std::string>& contexts_seen() {
  static std::set<std::string> seen;
  return seen;
}

void record(const std::set<std::string>& seen) { contexts_seen().insert(seen.begin(), seen.end()); }

TEST(FixTexts, ShmFixesOfWarningsAndTheStrictErrorHoldTheTables) {
  for (const uint64_t table : kAsked) {
    record(check_fixes(shm_fix_text(table, RuntimeEnvironment::kUnknown), table));
    const std::vector<HostShmFacts> hosts = {{"a", true, 64 * kMiB, 4}, {"b", false, 0, 4}};
    for (const Warning& w : fallback_warnings(host_shared_fitness(hosts, table), table))
      record(check_fixes(w.text, table));
    EngramConfig config;
    config.cpu_offload = true;
    config.dp_shared_memory = true;
    ParallelLayout layout;
    layout.dp = 4;
    const Status strict = validate_dp_shared_memory_strict(config, layout, hosts, table);
    ASSERT_FALSE(strict.is_ok());
    record(check_fixes(strict.message(), table));
  }
}

// The memory fit's fixes: a limit per rank, a container's, a sizeLimit; the
// size asked is what the ranks will hold (read from the plan).
TEST(FixTexts, MemoryFitFixesHoldWhatTheRanksWillHold) {
  for (const char* model : {"deepseek-v4.1-flash", "deepseek-v4.1-flash-layer1", "tiny"}) {
    for (int tp : {1, 4}) {
      Deployment d = testing::deployment(1, 4, tp, 4 / tp, 64 * kMiB);
      d.model = model;
      d.hosts[0].host_memory_bytes = 4096 * kGiB;
      d.config.cpu_offload = true;
      d.config.dp_shared_memory = false;
      for (bool container : {false, true}) {
        if (container) d.hosts[0].memory_limit_bytes = 1;
        else d.hosts[0].memory_limit_bytes_per_rank = 1;
        WarningSink sink;
        auto plan = plan_deployment(d, sink);
        ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
        uint64_t asked = 0;
        if (container) {
          for (const RankPlan& r : plan->ranks) asked += r.memory.limit_charged_bytes();
        } else {
          for (const RankPlan& r : plan->ranks) asked = std::max(asked, r.memory.limit_charged_bytes());
        }
        const Status fits = check_memory_fits(plan.value());
        ASSERT_EQ(fits.code(), ErrorCode::kResourceExhausted) << model;
        record(check_fixes(fits.message(), asked));
        d.hosts[0].memory_limit_bytes.reset();
        d.hosts[0].memory_limit_bytes_per_rank.reset();
      }
    }
    Deployment shared = testing::dep4_gb200(1024 * kGiB);
    shared.model = model;
    shared.hosts[0].tmpfs_bytes_enforced = 1;
    WarningSink sink;
    auto plan = plan_deployment(shared, sink);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    const Status fits = check_memory_fits(plan.value());
    ASSERT_EQ(fits.code(), ErrorCode::kResourceExhausted) << model;
    record(check_fixes(fits.message(), plan->hosts[0].shm_bytes));
  }
}

// The emulator's ENOSPC names the --shm-size that holds what is in use and the segment.
TEST(FixTexts, TheEmulatorsEnospcAsksForRoomForTheSegment) {
  for (const uint64_t segment : {uint64_t{3 * kMiB + 1}, uint64_t{100 * kMiB}}) {
    sim::WorldSpec spec;
    spec.hosts = sim::plain_hosts("node-", 1, 1, "H200");
    spec.hosts[0].tmpfs_bytes_total = 2 * kMiB;
    Status made;
    auto run = sim::run_world(spec, [&](RankBackend& b) -> Status {
      made = b.shm->create("engramlab-job-layer1", segment).status();
      return Status::ok();
    });
    ASSERT_TRUE(run.is_ok());
    ASSERT_EQ(made.code(), ErrorCode::kResourceExhausted) << made.to_string();
    record(check_fixes(made.message(), segment));
  }
}

// `scenario run --real` on a host that is not the scenario's offers the
// namespaces that make it so, with a tmpfs of the scenario's /dev/shm.
TEST(FixTexts, TheRealRunnersNamespaceLineMountsTheScenariosShm) {
  const std::string file = std::string(ENGRAM_SOURCE_DIR) + "/scenarios/dep4_shared.yaml";
  const testing::ProcessRun r =
      testing::run(std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab scenario run --real " + file);
  if (r.output.find("skipped: this host is not the scenario's") == std::string::npos)
    GTEST_SKIP() << "SKIPPED: this host is the scenario's own (gb200-0 with a 190 GiB /dev/shm)";
  record(check_fixes(r.output, 190 * kGiB));
}

// Every context above was met by some case (run after them: gtest runs a
// file's tests in order); and no source prints a size fix from a file these
// cases do not cover.
TEST(FixTexts, ZEveryContextIsMetAndEveryPrintedFixIsCovered) {
  if (contexts_seen().empty()) {
    // Run alone (ctest runs each case in a process of its own): the file's
    // cases run again in one child process, in order, this one last, where
    // the contexts they met are seen.
    const testing::ProcessRun all =
        testing::run(std::filesystem::read_symlink("/proc/self/exe").string() + " --gtest_filter='FixTexts.*'");
    EXPECT_EQ(all.exit_code, 0) << all.output;
    EXPECT_NE(all.output.find("FixTexts.ZEveryContextIsMetAndEveryPrintedFixIsCovered"), std::string::npos)
        << all.output;
    return;
  }
  for (const Context& c : contexts()) {
    if (std::string(c.name).find("tmpfs mount -o size=") == std::string::npos) {  // only where this host is not the scenario's
      EXPECT_TRUE(contexts_seen().count(c.name)) << c.name << " was not met by any fix text";
    }
  }
  // observed_host.cc writes sizes by exact_size_text (doctor --emit-host),
  // which tests/host_comparison_test.cc parses back to the same bytes.
  const std::set<std::string> covered = {"core/plan/shm_fix.cc", "core/plan/memory_fit.cc",
                                         "sim/sim_host_shared_memory.cc", "harness/real_scenario.cc",
                                         "core/deployment/observed_host.cc"};
  const std::regex printed(
      R"((--shm-size=|--memory=|size=|MemoryMax=|sizeLimit: |limits\.memory: |memory_limit: |memory_limit_per_rank: |--memory-limit |--memory-limit-per-rank |shm_size_limit: |--shm-size-limit )\{\})");
  namespace fs = std::filesystem;
  const fs::path root(ENGRAM_SOURCE_DIR);
  for (const char* dir : {"core", "sim", "backends", "harness", "apps", "operator_checks"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      if (!entry.is_regular_file() || (entry.path().extension() != ".cc" && entry.path().extension() != ".h")) continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string source = text.str();
      if (!std::regex_search(source, printed)) continue;
      const std::string relative = fs::relative(entry.path(), root).string();
      EXPECT_TRUE(covered.count(relative)) << relative << " prints a fix with a size that no case here checks";
    }
  }
}

}  // namespace
}  // namespace engram
