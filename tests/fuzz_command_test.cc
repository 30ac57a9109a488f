// `engramlab fuzz --file F [--sites a,b]`: a sweep around the user's
// deployment holds every invariant deterministically and fires every site
// the deployment reaches; bad sites exit 2 naming the known ones; a failing
// seed's reproduction line names the file and the sites.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "engramlab_command.h"
#include "harness/swarm.h"
#include "harness/swarm_junit.h"
#include "harness/swarm_target.h"

namespace engram::testing {
namespace {

const std::string kScenarios = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";

TEST(FuzzFile, ShippedNvl72ScenarioHoldsDeterministically) {
  // 1,152 ranks a run: a few seeds here; the acceptance sweep is 500.
  const CommandOutput out =
      run_engramlab("fuzz --file " + kScenarios + "/nvl72_16_racks.yaml --seeds 6 --check-determinism");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("0 failed"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("around"), std::string::npos) << out.text;
}

TEST(FuzzFile, SweepFiresEverySiteTheDeploymentReaches) {
  const CommandOutput out = run_engramlab("fuzz --file " + kScenarios +
                                          "/deployments/tp8_h200_peer.yaml --seeds 500 --check-determinism");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  // device_peer reaches the exchange sites and the process sites, not /dev/shm.
  EXPECT_NE(out.text.find("8 of 8 fault sites aimed at fired"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("shm_create"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("(not aimed at)"), std::string::npos) << out.text;
}

// --seed takes a range as scenario run's does (issue 48): 3-5 runs the seeds
// --seed 3 --seeds 3 runs, the same outcomes line by line; a list with a gap,
// or a range beside another --seeds count, is refused naming both.
TEST(FuzzSeeds, ARangeRunsTheSeedsAFirstSeedAndACountRun) {
  const CommandOutput range = run_engramlab("fuzz --seed 3-5 --verbose");
  const CommandOutput counted = run_engramlab("fuzz --seed 3 --seeds 3 --verbose");
  ASSERT_EQ(range.exit_code, 0) << range.text;
  ASSERT_EQ(counted.exit_code, 0) << counted.text;
  for (const char* seed : {"seed 3: pass", "seed 4: pass", "seed 5: pass"}) {
    EXPECT_NE(range.text.find(seed), std::string::npos) << range.text;
    const size_t at = counted.text.find(seed);
    ASSERT_NE(at, std::string::npos) << counted.text;
    const std::string line = counted.text.substr(at, counted.text.find('\n', at) - at);
    EXPECT_NE(range.text.find(line), std::string::npos) << "the same trace hash: " << line << "\n" << range.text;
  }
  EXPECT_EQ(range.text.find("seed 6:"), std::string::npos) << range.text;
  EXPECT_NE(range.text.find("fuzz: 3 seeds from 3"), std::string::npos) << range.text;

  const CommandOutput gap = run_engramlab("fuzz --seed 1,5");
  EXPECT_EQ(gap.exit_code, 2) << gap.text;
  EXPECT_NE(gap.text.find("--seed 1,5: fuzz runs consecutive seeds; give one range (--seed 1-5)"), std::string::npos)
      << gap.text;
  const CommandOutput both = run_engramlab("fuzz --seed 1-5 --seeds 3");
  EXPECT_EQ(both.exit_code, 2) << both.text;
  EXPECT_NE(both.text.find("--seed 1-5 names 5 seeds and --seeds 3 another count"), std::string::npos) << both.text;
}

// --junitxml: a testcase per seed, and one for the sweep's every-site rule.
TEST(FuzzFile, JunitXmlHasATestcasePerSeed) {
  char name[] = "/tmp/fuzz_junit_test_XXXXXX";
  ASSERT_NE(::mkdtemp(name), nullptr);
  const std::string dir = name, xml = dir + "/fuzz.xml";
  const CommandOutput out = run_engramlab("fuzz --file " + kScenarios +
                                          "/deployments/tp8_h200_peer.yaml --seeds 500 --junitxml " + xml);
  EXPECT_EQ(out.exit_code, 0) << out.text;
  const CommandOutput parsed = run_engramlab(
      "", "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
          "c = d.getElementsByTagName('testcase'); "
          "print('suites', len(d.getElementsByTagName('testsuite')), 'cases', len(c), 'failures', "
          "len(d.getElementsByTagName('failure')), c[0].getAttribute('name'), '|', c[-1].getAttribute('name'))\" " +
              xml + " #");
  std::system(("rm -rf '" + dir + "'").c_str());
  EXPECT_EQ(parsed.exit_code, 0) << parsed.text;
  EXPECT_NE(parsed.text.find("suites 1 cases 501 failures 0 seed 1 | every fault site fired"), std::string::npos)
      << parsed.text;
}

// A failing seed's testcase carries its outcome as the message, and the job,
// every violation and the reproduce line as the text; a sweep that must fire
// every site and did not fails its own testcase naming the sites. (A real
// sweep has no failing seed to show, so the report is made by hand.)
TEST(FuzzJunit, AFailingSeedCarriesItsViolationsAndTheReproduceLine) {
  harness::SwarmReport report;
  report.first_seed = 7;
  report.seed_count = harness::kEverySiteSweepSeeds;
  report.expected_sites = {sim::FaultSite::kImport, sim::FaultSite::kSend};
  report.fired[static_cast<size_t>(sim::FaultSite::kSend)] = 3;
  harness::SwarmSeedResult bad;
  bad.seed = 9;
  bad.passed = false;
  bad.violations = {"ledger: 1 fd left open on rank 2 <after> import"};
  bad.description = "hosts=1 tp=2 dp=1 faults: import rank 1";
  bad.outcome = "error unavailable (step import)";
  bad.reproduction = "/abs/engramlab fuzz --seed 9 --seeds 1 --file '/abs/a b.yaml'";
  report.failures.push_back(bad);
  char name[] = "/tmp/fuzz_junit_unit_XXXXXX";
  ASSERT_NE(::mkdtemp(name), nullptr);
  const std::string dir = name, xml = dir + "/fuzz.xml";
  std::ofstream(xml) << harness::swarm_junit_xml(report, "/abs/a b.yaml");
  const CommandOutput parsed = run_engramlab(
      "", "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
          "c = d.getElementsByTagName('testcase'); f = d.getElementsByTagName('failure'); "
          "print('cases', len(c), 'failures', len(f), 'classname', c[0].getAttribute('classname')); "
          "[print('failed', x.parentNode.getAttribute('name'), '| message', x.getAttribute('message'), '| text', "
          "x.firstChild.data if x.firstChild else '') for x in f]\" " +
              xml + " #");
  std::system(("rm -rf '" + dir + "'").c_str());
  ASSERT_EQ(parsed.exit_code, 0) << parsed.text;
  EXPECT_NE(parsed.text.find("cases 501 failures 2 classname fuzz./abs/a b.yaml"), std::string::npos) << parsed.text;
  EXPECT_NE(parsed.text.find("failed seed 9 | message error unavailable (step import) | text job: hosts=1 tp=2 dp=1 "
                             "faults: import rank 1\n- ledger: 1 fd left open on rank 2 <after> import\nreproduce: "
                             "/abs/engramlab fuzz --seed 9 --seeds 1 --file '/abs/a b.yaml'"),
            std::string::npos)
      << parsed.text;
  EXPECT_NE(parsed.text.find("failed every fault site fired | message never fired: import"), std::string::npos)
      << parsed.text;
  // Below the every-site sweep size there is no such testcase, and a passing seed has no failure.
  report.seed_count = 3;
  report.failures.clear();
  const std::string small = harness::swarm_junit_xml(report, "");
  EXPECT_EQ(small.find("<failure"), std::string::npos) << small;
  EXPECT_EQ(small.find("every fault site"), std::string::npos) << small;
  EXPECT_NE(small.find("seed 9"), std::string::npos) << small;
}

// Issue 50, item 21: a file name's control characters and non-UTF-8 bytes
// (Latin-1 \xe9) would make the XML not well-formed, and a dashboard rejects
// the whole report: they are written as the text \xNN; python's parser
// reads the report back.
TEST(FuzzJunit, ControlAndNonUtf8BytesInAFileNameLeaveTheXmlWellFormed) {
  harness::SwarmReport report;
  report.first_seed = 1;
  report.seed_count = 1;
  harness::SwarmSeedResult bad;
  bad.seed = 1;
  bad.passed = false;
  bad.outcome = "error \x01 \xff";
  bad.reproduction = "engramlab fuzz --file '/abs/caf\xe9\x1b[31m.yaml'";
  report.failures.push_back(bad);
  char name[] = "/tmp/engramlab-junit-bytes-XXXXXX";
  ASSERT_NE(::mkdtemp(name), nullptr);
  const std::string dir = name, xml = dir + "/fuzz.xml";
  std::ofstream(xml) << harness::swarm_junit_xml(report, "/abs/caf\xe9\x1b[31m\x07.yaml");
  const CommandOutput parsed = run_engramlab(
      "", "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
          "c = d.getElementsByTagName('testcase'); print('classname', c[0].getAttribute('classname'))\" " + xml + " #");
  std::system(("rm -rf '" + dir + "'").c_str());
  ASSERT_EQ(parsed.exit_code, 0) << parsed.text;
  EXPECT_NE(parsed.text.find("classname fuzz./abs/caf\\xe9\\x1b[31m\\x07.yaml"), std::string::npos) << parsed.text;
}

TEST(FuzzFile, SitesAimTheFaults) {
  const CommandOutput out = run_engramlab("fuzz --file " + kScenarios +
                                          "/deployments/tp8_h200_peer.yaml --seeds 60 --sites import,slow --json");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  // Only the aimed sites fire.
  for (const char* other : {"\"site\":\"export\"", "\"site\":\"map\""}) {
    const size_t at = out.text.find(other);
    ASSERT_NE(at, std::string::npos) << out.text;
    const size_t fired = out.text.find("\"fired\":", at);
    EXPECT_EQ(out.text.compare(fired, 10, "\"fired\":0,"), 0) << out.text.substr(at, 120);
  }
}

TEST(FuzzFile, UnknownSiteExitsTwoNamingTheKnownOnes) {
  const CommandOutput out = run_engramlab("fuzz --sites imprt,slow --seeds 1");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("'imprt' is not a fault site"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("did you mean 'import'"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("export, send, import, map, access, shm_create"), std::string::npos) << out.text;
}

TEST(FuzzFile, SitesTheDeploymentNeverReachesExitTwo) {
  const CommandOutput out =
      run_engramlab("fuzz --file " + kScenarios + "/deployments/tp8_h200_peer.yaml --sites shm_write --seeds 1");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("never reach them"), std::string::npos) << out.text;
}

TEST(FuzzFile, MissingFileExitsTwo) {
  const CommandOutput out = run_engramlab("fuzz --file /nonexistent/deployment.yaml --seeds 1");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("/nonexistent/deployment.yaml"), std::string::npos) << out.text;
}

// --compare-engines (the main job's emulator part): the DEP8 file under each
// engine, two lines or so an engine; SGLang's default (`shared` across two
// nodes) cannot run there, so its row runs the per_rank layout its plan
// column names, and says so. Each row's seeds are the ones `fuzz --engine E`
// (with --host-layout where the row names one) runs: the same outcomes.
TEST(FuzzCompareEngines, EachEngineRunsItsOwnPlanAndSaysWhatRan) {
  const std::string file = kScenarios + "/deployments/dep8_gb300_two_nodes.yaml";
  const CommandOutput out = run_engramlab("fuzz --file " + file + " --compare-engines --seeds 12");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("engramlab   host_shared; 12 seeds: "), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("vllm        host_shared; 12 seeds: "), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("sglang      sglang_private with host_layout: per_rank (its default refused here; plan "
                          "--engine sglang says why);\n            12 seeds: "),
            std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("fuzz --compare-engines: 12 seeds from 1 under each of 3 engines: 0 broke a rule"),
            std::string::npos)
      << out.text;
  // Under a screen: the main job prints it under the plan comparison.
  EXPECT_LE(std::count(out.text.begin(), out.text.end(), '\n'), 12) << out.text;
  // The SGLang row's seeds, run alone with the layout it names.
  const CommandOutput alone =
      run_engramlab("fuzz --file " + file + " --engine sglang --host-layout per_rank --seeds 12 --brief");
  ASSERT_EQ(alone.exit_code, 0) << alone.text;
  const size_t ok_at = alone.text.find("ok sglang_private");
  ASSERT_NE(ok_at, std::string::npos) << alone.text;
  const std::string ok_line = alone.text.substr(ok_at, alone.text.find('\n', ok_at) - ok_at);
  const std::string ok_seeds = ok_line.substr(ok_line.find_last_of(' ') + 1);
  const size_t row = out.text.find("sglang      ");
  EXPECT_NE(out.text.find("12 seeds: " + ok_seeds + " ok, 0 broke a rule", row), std::string::npos)
      << alone.text << "\n" << out.text;
  // Without the layout SGLang's plan refuses every seed before a rank starts.
  const CommandOutput as_given = run_engramlab("fuzz --file " + file + " --engine sglang --seeds 4 --brief");
  EXPECT_NE(as_given.text.find("error failed_precondition (decide placement)"), std::string::npos) << as_given.text;
}

// An engine that lacks a setting the file writes (vLLM has no peer_shards):
// its row runs the deployment its comparison column was planned from,
// without that setting, and says so; `fuzz --without` runs that row alone,
// seed for seed (its rerun lines name --without: ReproductionLineNamesFileAndSites).
TEST(FuzzCompareEngines, AnEngineThatLacksASettingRunsWithoutIt) {
  const std::string file = kScenarios + "/deployments/tp8_h200_peer.yaml";
  const CommandOutput out = run_engramlab("fuzz --file " + file + " --compare-engines --seeds 6");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  const size_t row = out.text.find("\nvllm        ");
  ASSERT_NE(row, std::string::npos) << out.text;
  EXPECT_EQ(out.text.find("\nvllm        host_head_sharded without peer_shards (it lacks it; as asked, refused);"), row)
      << out.text;
  const CommandOutput alone =
      run_engramlab("fuzz --file " + file + " --engine vllm --without peer_shards --seeds 6 --verbose");
  ASSERT_EQ(alone.exit_code, 0) << alone.text;
  EXPECT_EQ(alone.text.find("failed_precondition (decide placement)"), std::string::npos) << alone.text;
  size_t ok = 0;
  for (size_t at = alone.text.find(" ok "); at != std::string::npos; at = alone.text.find(" ok ", at + 1)) ++ok;
  EXPECT_NE(out.text.find("6 seeds: " + std::to_string(ok) + " ok", row), std::string::npos) << alone.text << out.text;
}

// The other side: flags that name one run, or no deployment to compare, are
// exit 2 naming the flag and the fix; --host-layout wants a file too, and a
// layout the engine lacks is refused by plan's check, naming the layouts.
TEST(FuzzCompareEngines, FlagsThatNameOneRunOrNoFileExitTwo) {
  const std::string file = kScenarios + "/deployments/dep8_gb300_two_nodes.yaml";
  const CommandOutput no_file = run_engramlab("fuzz --compare-engines --seeds 2");
  EXPECT_EQ(no_file.exit_code, 2) << no_file.text;
  EXPECT_NE(no_file.text.find("--compare-engines: runs a deployment's file under each engine; give --file too"),
            std::string::npos)
      << no_file.text;
  const CommandOutput one_engine = run_engramlab("fuzz --file " + file + " --compare-engines --engine vllm --json");
  EXPECT_EQ(one_engine.exit_code, 2) << one_engine.text;
  EXPECT_NE(one_engine.text.find("--engine, --json names one run: drop it, or run `fuzz --file F --engine NAME`"),
            std::string::npos)
      << one_engine.text;
  const CommandOutput misspelt = run_engramlab("fuzz --file " + file + " --without peer_shard --seeds 1");
  EXPECT_EQ(misspelt.exit_code, 2) << misspelt.text;
  EXPECT_NE(misspelt.text.find("--without: 'peer_shard' is not a setting some engine lacks; those are peer_shards, "),
            std::string::npos)
      << misspelt.text;
  EXPECT_NE(misspelt.text.find("did you mean 'peer_shards'?"), std::string::npos) << misspelt.text;
  const CommandOutput without_file = run_engramlab("fuzz --without peer_shards --seeds 1");
  EXPECT_EQ(without_file.exit_code, 2) << without_file.text;
  const CommandOutput layout_alone = run_engramlab("fuzz --host-layout per_rank --seeds 2");
  EXPECT_EQ(layout_alone.exit_code, 2) << layout_alone.text;
  EXPECT_NE(layout_alone.text.find("--host-layout per_rank: sets the host layout of a deployment's file; give --file"),
            std::string::npos)
      << layout_alone.text;
  const CommandOutput unknown =
      run_engramlab("fuzz --file " + file + " --engine sglang --host-layout per_node --seeds 2 --brief");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.text;
  EXPECT_NE(unknown.text.find("--host-layout per_node: config.host_layout: engine sglang has no host layout "
                              "'per_node'; it offers shared, per_rank"),
            std::string::npos)
      << unknown.text;
}

TEST(FuzzFile, ReproductionLineNamesFileAndSites) {
  auto target = harness::load_swarm_target(kScenarios + "/deployments/tp8_h200_peer.yaml", "import");
  ASSERT_TRUE(target.is_ok()) << target.status().to_string();
  const harness::SwarmSeedResult r = harness::run_swarm_seed(7, true, target.value());
  EXPECT_NE(r.reproduction.find("fuzz --file "), std::string::npos) << r.reproduction;
  EXPECT_NE(r.reproduction.find("tp8_h200_peer.yaml --seed 7 --seeds 1 --sites import --check-determinism"),
            std::string::npos)
      << r.reproduction;
  // A host layout set on the target is named too (fuzz --host-layout).
  harness::SwarmTarget laid_out = target.value();
  laid_out.engine = "sglang";
  laid_out.host_layout = "per_rank";
  const std::vector<std::string> rerun = harness::swarm_rerun_args(7, false, laid_out);
  const std::vector<std::string> tail(rerun.end() - 4, rerun.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"--engine", "sglang", "--host-layout", "per_rank"}));
  laid_out.without = {"peer_shards", "thp_packing"};
  const std::vector<std::string> rerun_without = harness::swarm_rerun_args(7, false, laid_out);
  EXPECT_EQ(rerun_without.back(), "peer_shards,thp_packing");
  EXPECT_EQ(rerun_without[rerun_without.size() - 2], "--without");
  // The same seed and target draw the same case.
  EXPECT_EQ(harness::draw_swarm_case(7, target.value()).description, r.description);
}

}  // namespace
}  // namespace engram::testing

namespace engram::testing {
namespace {

// The trace hash `fuzz --verbose` prints for one seed.
std::string seed_trace_hash(const std::string& args) {
  const CommandOutput out = run_engramlab("fuzz --seeds 1 --verbose " + args);
  const size_t at = out.text.find("pass ");
  return at == std::string::npos ? "(no passing seed line in: " + out.text + ")" : out.text.substr(at + 5, 16);
}

// The trace hash `scenario run --json` reports for `file`.
std::string scenario_trace_hash(const std::string& file) {
  const CommandOutput out = run_engramlab("scenario run --json " + file);
  const size_t at = out.text.find("\"trace_hash\":\"");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  return at == std::string::npos ? "(none in: " + out.text + ")" : out.text.substr(at + 14, 16);
}

void expect_emitted_scenario_reproduces(const std::string& file_flag, uint64_t seed) {
  char path[] = "/tmp/fuzz_emit_test_XXXXXX.yaml";
  const int fd = ::mkstemps(path, 5);
  ASSERT_GE(fd, 0);
  ::close(fd);
  const std::string seed_text = std::to_string(seed);
  const CommandOutput emitted =
      run_engramlab("fuzz --emit-scenario " + seed_text + " " + file_flag, "", std::string("> ") + path);
  EXPECT_EQ(emitted.exit_code, 0) << emitted.text;
  EXPECT_EQ(scenario_trace_hash(path), seed_trace_hash(file_flag + " --seed " + seed_text)) << "seed " << seed;
  ::unlink(path);
}

TEST(FuzzEmitScenario, EmittedScenarioRerunsWithTheSameTraceHash) {
  for (uint64_t seed : {1, 3, 6, 11}) expect_emitted_scenario_reproduces("", seed);
}

TEST(FuzzEmitScenario, EmittedScenarioAroundAFileRerunsWithTheSameTraceHash) {
  for (uint64_t seed : {2, 5}) expect_emitted_scenario_reproduces("--file " + kScenarios + "/deployments/two_nodes_interleaved.yaml", seed);
}


// Issue 50, item 9: a scenario naming its model and GPU files relative to
// itself (top-level model, lookup.model, hosts[].gpu_model) emits a scenario
// whose every such path is absolute: it loads from anywhere, and never runs
// against another file of that name.
TEST(FuzzEmitScenario, RelativeModelAndGpuFilesAreWrittenAbsolute) {
  char dir_templ[] = "/tmp/engramlab-emit-paths-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_templ), nullptr);
  const std::string dir = dir_templ;
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/models " + dir + "/gpus && cp " + std::string(ENGRAM_SOURCE_DIR) +
                         "/models/tiny.yaml " + dir + "/models/m.yaml").c_str()),
            0);
  std::ofstream(dir + "/gpus/g.yaml") << "name: L40S\nmemory: 44.4GiB\nhost_memory_per_gpu: 64GiB\n";
  std::ofstream(dir + "/scenario.yaml")
      << "model: models/m.yaml\nhosts: [{name: a, gpus: 2, gpu_model: gpus/g.yaml}]\nlayout: {tp: 1, dp: 2}\n"
         "lookup: {model: models/m.yaml, tokens: 4}\nseed: 1\nexpect: {no_leaks: true}\n";
  const CommandOutput emitted = run_engramlab("fuzz --file " + dir + "/scenario.yaml --emit-scenario 3");
  const std::string text = emitted.text;
  std::system(("rm -rf '" + dir + "'").c_str());
  ASSERT_EQ(emitted.exit_code, 0) << text;
  EXPECT_EQ(text.find("model: models/m.yaml"), std::string::npos) << text;
  EXPECT_EQ(text.find("gpu_model: gpus/g.yaml"), std::string::npos) << text;
  size_t absolute_models = 0;
  for (size_t at = text.find(dir + "/models/m.yaml"); at != std::string::npos;
       at = text.find(dir + "/models/m.yaml", at + 1))
    ++absolute_models;
  EXPECT_GE(absolute_models, 2u) << "the top-level model and lookup.model:\n" << text;
  EXPECT_NE(text.find(dir + "/gpus/g.yaml"), std::string::npos) << text;
}

}  // namespace
}  // namespace engram::testing
