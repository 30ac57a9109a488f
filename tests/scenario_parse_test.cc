// Scenario YAML: every field parsed, and unknown fields and bad values
// refused with the line, the column, the field and the fix.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness/scenario.h"
#include "core/base/units.h"
#include "sim/faults.h"

namespace engram {
namespace {

constexpr const char* kFull = R"(name: full
description: every field
model: deepseek-v4.1-flash
hosts:
  - {name: a, gpus: 4, gpu_model: GB200, shm_size: 190GiB}
layout: {tp: 2, dp: 2}
config: {cpu_offload: true}
seed: 42
faults:
  planned:
    - {site: import, rank: 1, occurrence: 2}
    - {site: rank_death, rank: 3, at: collective}
  rates: {send: 0.25, shm_write: 0}
lookup: {model: tiny, tokens: 9, run: true}
expect:
  placement:
    - {ranks: 0-1, placement: host_shared}
    - {ranks: 3, placement: host_private}
  warnings: ["a b", c]
  error: {kind: unavailable, contains: [died], rank: 3, step: rank_death}
  memory: {hbm_per_gpu: 23.6GiB, host_per_node: 190GiB}
  handle_type: fabric
  faults_fired: [import, rank_death]
  no_leaks: true
)";

TEST(ScenarioParse, ReadsEveryField) {
  auto s = harness::parse_scenario_text(kFull, "full.yaml");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->name, "full");
  EXPECT_EQ(s->deployment.hosts.size(), 1u);
  EXPECT_EQ(s->deployment.layout.dp, 2);
  EXPECT_TRUE(s->deployment.config.cpu_offload);
  EXPECT_EQ(s->seed, 42u);
  ASSERT_EQ(s->planned_faults.size(), 2u);
  EXPECT_EQ(s->planned_faults[0].site, "import");
  EXPECT_EQ(s->planned_faults[0].occurrence, 2);
  EXPECT_EQ(s->planned_faults[1].at, "collective");
  ASSERT_EQ(s->fault_rates.size(), 2u);
  EXPECT_EQ(s->fault_rates[0].site, "send");
  EXPECT_DOUBLE_EQ(s->fault_rates[0].probability, 0.25);
  EXPECT_EQ(s->lookup.tokens, 9);
  ASSERT_EQ(s->expect.placements.size(), 2u);
  EXPECT_EQ(s->expect.placements[1].first_rank, 3);
  EXPECT_EQ(s->expect.placements[1].last_rank, 3);
  EXPECT_EQ(s->expect.placements[1].placement, Placement::kHostPrivate);
  ASSERT_TRUE(s->expect.warnings.has_value());
  EXPECT_EQ(s->expect.warnings->at(0), "a b");
  ASSERT_TRUE(s->expect.error.has_value());
  EXPECT_EQ(s->expect.error->kind, ErrorCode::kUnavailable);
  EXPECT_EQ(s->expect.error->rank, 3);
  EXPECT_EQ(s->expect.error->step, "rank_death");
  EXPECT_EQ(s->expect.handle_type, HandleType::kFabric);
  EXPECT_EQ(s->expect.faults_fired.size(), 2u);
  // Sizes match within half a unit of the last written digit.
  ASSERT_TRUE(s->expect.hbm_per_gpu.has_value());
  EXPECT_TRUE(s->expect.hbm_per_gpu->matches(static_cast<uint64_t>(23.64 * kGiB)));
  EXPECT_FALSE(s->expect.hbm_per_gpu->matches(static_cast<uint64_t>(23.66 * kGiB)));
  EXPECT_TRUE(s->expect.host_per_node->matches(static_cast<uint64_t>(190.4 * kGiB)));
  EXPECT_FALSE(s->expect.host_per_node->matches(static_cast<uint64_t>(189.4 * kGiB)));
}

TEST(ScenarioParse, DefaultsAreDocumented) {
  auto s = harness::parse_scenario_text("hosts: [{name: a, gpus: 1}]\nexpect: {}\n", "scenarios/defaults.yaml");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->name, "defaults");
  EXPECT_EQ(s->seed, 1u);
  EXPECT_TRUE(s->lookup.run);
  EXPECT_EQ(s->lookup.model, "tiny");
  EXPECT_FALSE(s->expect.error.has_value());
  EXPECT_FALSE(s->expect.warnings.has_value());
  EXPECT_TRUE(s->expect.placements.empty());
}

TEST(ScenarioParse, EveryFaultSiteOfTheEmulatorParses) {
  // One table (sim/faults.h) names the sites: every one is a scenario site,
  // and a process fault takes a checkpoint.
  for (const sim::FaultSiteInfo& site : sim::kFaultSites) {
    const std::string at = sim::is_process_fault(site.site) ? ", at: collective" : "";
    auto s = harness::parse_scenario_text(fmt::format("hosts: [{{name: a, gpus: 2}}]\nlayout: {{tp: 1, dp: 2}}\nfaults: {{planned: [{{site: {}, rank: 1{}}}]}}\nexpect: {{}}\n",
                                             site.name, at),
                                 "scenarios/sites.yaml");
    ASSERT_TRUE(s.is_ok()) << site.name << ": " << s.status().to_string();
    EXPECT_EQ(s->planned_faults[0].site, site.name);
  }
}

// expect.step_time_us_max in its three forms, and a slow fault's factors.
TEST(ScenarioParse, StepTimeBoundsAndSlowFactors) {
  const std::string head =
      "hosts: [{name: a, gpus: 4}]\nlayout: {tp: 4, dp: 1}\nfaults: {planned: [{site: slow, rank: 2, link_factor: 2, "
      "gpu_factor: 1.5}]}\nexpect:\n  step_time_us_max: ";
  auto s = harness::parse_scenario_text(head + "12.5\n", "t.yaml");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_EQ(s->expect.step_time_us_max.size(), 1u);
  EXPECT_EQ(s->expect.step_time_us_max[0].first_rank, 0);
  EXPECT_EQ(s->expect.step_time_us_max[0].last_rank, -1);
  EXPECT_EQ(s->expect.step_time_us_max[0].max_us, 12.5);
  EXPECT_FALSE(s->expect.step_time_us_max[0].p50_us.has_value());
  ASSERT_EQ(s->planned_faults.size(), 1u);
  EXPECT_EQ(s->planned_faults[0].link_factor, 2.0);
  EXPECT_EQ(s->planned_faults[0].gpu_factor, 1.5);
  EXPECT_EQ(s->planned_faults[0].delay_ms, 0u);

  s = harness::parse_scenario_text(head + "{p50: 8}\n", "t.yaml");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->expect.step_time_us_max[0].p50_us, 8.0);
  EXPECT_FALSE(s->expect.step_time_us_max[0].max_us.has_value());

  s = harness::parse_scenario_text(head + "[{ranks: 0-1, max: 7}, {ranks: 2, p50: 11, max: 14}]\n", "t.yaml");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_EQ(s->expect.step_time_us_max.size(), 2u);
  EXPECT_EQ(s->expect.step_time_us_max[1].first_rank, 2);
  EXPECT_EQ(s->expect.step_time_us_max[1].last_rank, 2);
  EXPECT_EQ(s->expect.step_time_us_max[1].p50_us, 11.0);
  EXPECT_EQ(s->expect.step_time_us_max[1].max_us, 14.0);
}

struct BadCase {
  const char* name;
  std::string yaml;
  const char* position;  // "line L, column C"
  std::vector<const char*> words;
};

std::string base(const std::string& expect_body, const std::string& extra = "") {
  return "hosts: [{name: a, gpus: 2}]\nlayout: {tp: 1, dp: 2}\n" + extra + "expect:\n" + expect_body;
}

TEST(ScenarioParse, UnknownFieldsAndBadValuesNameLineColumnFieldAndFix) {
  const BadCase cases[] = {
      {"unknown top-level field", "hosts: [{name: a, gpus: 2}]\nsed: 3\nexpect: {}\n", "line 2, column 1",
       {"sed", "unknown field", "known fields here", "seed"}},
      {"unknown expect field", base("  placment: host_shared\n"), "line 4, column 3",
       {"expect.placment", "unknown field 'placment'", "placement"}},
      {"bad placement", base("  placement: host_sharde\n"), "line 4, column 14",
       {"expect.placement", "'host_sharde' is not a placement", "host_shared"}},
      {"bad error kind", base("  error: {kind: broken}\n"), "line 4, column 17",
       {"expect.error.kind", "'broken' is not an error kind", "failed_precondition"}},
      {"unknown error field", base("  error: {kind: unavailable, word: x}\n"), "line 4, column 30",
       {"expect.error.word", "known fields here: kind, contains, rank, step"}},
      {"bad handle type", base("  handle_type: fd\n"), "line 4, column 16", {"expect.handle_type", "posix_fd, fabric or none"}},
      {"bad size", base("  memory: {hbm_per_gpu: lots}\n"), "line 4, column 25", {"hbm_per_gpu", "lots"}},
      {"bad fault site", base("  {}\n", "faults: {planned: [{site: imprt, rank: 0}]}\n"), "line 3, column 27",
       {"faults.planned[0].site", "'imprt' is not a fault site", "import"}},
      {"fault rank outside the world", base("  {}\n", "faults: {planned: [{site: import, rank: 99}]}\n"),
       "line 3, column 41", {"faults.planned[0].rank", "rank 99 is outside the world; ranks are 0..1"}},
      {"missing fault rank", base("  {}\n", "faults:\n  planned:\n    - {site: map}\n"), "line 5, column 7",
       {"faults.planned[0].rank", "missing", "rank: 0"}},
      {"bad probability", base("  {}\n", "faults: {rates: {send: 2}}\n"), "line 3, column 24",
       {"faults.rates.send", "not a probability", "[0, 1]"}},
      {"at on a non-death fault", base("  {}\n", "faults: {planned: [{site: map, rank: 0, at: import}]}\n"),
       "line 3, column 45", {"faults.planned[0].at", "rank_death"}},
      {"bad lookup model", base("  {}\n", "lookup: {model: deepseek-v4.1-flash}\n"), "line 3, column 17",
       {"lookup.model", "write tiny"}},
      {"negative tokens", base("  {}\n", "lookup: {tokens: -1}\n"), "line 3, column 18", {"lookup.tokens", "'-1' is not a whole number in [0, 4096]"}},
      {"bad seed", base("  {}\n", "seed: seven\n"), "line 3, column 7", {"seed", "'seven' is not a whole number in [0, 18446744073709551615]"}},
      {"bad boolean", base("  lookup_equal: yes please\n"), "line 4, column 17",
       {"expect.lookup_equal", "write true or false"}},
      {"no_leaks false", base("  no_leaks: false\n"), "line 4, column 13", {"expect.no_leaks", "never acceptable"}},
      {"bad rank range", base("  placement: [{ranks: 3-1, placement: host_shared}]\n"), "line 4, column 23",
       {"expect.placement[0].ranks", "rank range", "0-3"}},
      {"warnings not a list", base("  warnings: none\n"), "line 4, column 13", {"expect.warnings", "expected a list"}},
      {"deployment field error", "hosts: [{name: a, gpus: 2, shm: 1GiB}]\nexpect: {}\n", "line 1, column 28",
       {"hosts[0].shm", "unknown field"}},
      {"missing expect", "hosts: [{name: a, gpus: 2}]\n", "line 1, column 1", {"expect", "missing"}},
      {"not YAML", "hosts: [\n", "line 2, column 1", {"not valid YAML"}},
      {"step time zero", base("  step_time_us_max: 0\n"), "line 4, column 21",
       {"expect.step_time_us_max", "'0' is not a number above 0", "12.5"}},
      {"step time a word", base("  step_time_us_max: fast\n"), "line 4, column 21",
       {"expect.step_time_us_max", "'fast' is not a number"}},
      {"step time unknown bound", base("  step_time_us_max: {p99: 3}\n"), "line 4, column 22",
       {"expect.step_time_us_max.p99", "unknown field", "p50, max"}},
      {"step time no bound", base("  step_time_us_max: [{ranks: 0}]\n"), "line 4, column 22",
       {"expect.step_time_us_max[0]", "names no bound", "p50 and/or max"}},
      {"step time median above max", base("  step_time_us_max: {p50: 9, max: 5}\n"), "line 4, column 27",
       {"expect.step_time_us_max.p50", "9 us is above max 5 us", "lower p50 or raise max"}},
      {"step time ranks outside the world", base("  step_time_us_max: [{ranks: 1-4, max: 5}]\n"), "line 4, column 30",
       {"expect.step_time_us_max[0].ranks", "rank 4 is outside the world; ranks are 0..1"}},
      {"step time not a bound", base("  step_time_us_max: []\n"), "line 4, column 21",
       {"expect.step_time_us_max", "expected microseconds (12.5)"}},
      {"step time without lookups", base("  step_time_us_max: 5\n", "lookup: {run: false}\n"), "line 5, column 21",
       {"expect.step_time_us_max", "lookup.run is false"}},
      {"step time with an error", base("  error: {kind: unavailable}\n  step_time_us_max: 5\n"), "line 5, column 21",
       {"expect.step_time_us_max", "cannot also bound every rank's lookup step time"}},
      {"link factor on another site", base("  {}\n", "faults: {planned: [{site: map, rank: 0, link_factor: 2}]}\n"),
       "line 3, column 54", {"faults.planned[0].link_factor", "only a slow fault", "site: slow"}},
      {"link factor of 1", base("  {}\n", "faults: {planned: [{site: slow, rank: 0, link_factor: 1}]}\n"),
       "line 3, column 55", {"faults.planned[0].link_factor", "'1' is not a number above 1", "twice as slow"}},
      {"gpu factor a word", base("  {}\n", "faults: {planned: [{site: slow, rank: 0, gpu_factor: slow}]}\n"),
       "line 3, column 54", {"faults.planned[0].gpu_factor", "'slow' is not a number above 1"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto s = harness::parse_scenario_text(c.yaml, "bad.yaml");
    ASSERT_FALSE(s.is_ok());
    const std::string& m = s.status().message();
    EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(m.rfind("bad.yaml: ", 0), 0u) << m;
    EXPECT_NE(m.find(c.position), std::string::npos) << m;
    for (const char* w : c.words) EXPECT_NE(m.find(w), std::string::npos) << "'" << w << "' missing in: " << m;
  }
}

TEST(ScenarioParse, RankRanges) {
  EXPECT_EQ(harness::parse_rank_range("0-3").value(), std::make_pair(0, 3));
  EXPECT_EQ(harness::parse_rank_range("7").value(), std::make_pair(7, 7));
  EXPECT_FALSE(harness::parse_rank_range("3-").is_ok());
  EXPECT_FALSE(harness::parse_rank_range("a").is_ok());
  EXPECT_FALSE(harness::parse_rank_range("-1").is_ok());
}

TEST(ScenarioParse, ScenarioFilesListsYamlInOrderAndRefusesEmptyPlaces) {
  auto files = harness::scenario_files(std::string(ENGRAM_SOURCE_DIR) + "/scenarios");
  ASSERT_TRUE(files.is_ok());
  EXPECT_TRUE(std::is_sorted(files->files.begin(), files->files.end()));
  for (const auto& f : files->files) EXPECT_EQ(f.substr(f.size() - 5), ".yaml");
  EXPECT_TRUE(files->skipped.empty());
  EXPECT_FALSE(harness::scenario_files("/nonexistent/place").is_ok());
  EXPECT_FALSE(harness::scenario_files(std::string(ENGRAM_SOURCE_DIR) + "/scenarios/deployments/../../core").is_ok());
}

}  // namespace
}  // namespace engram
