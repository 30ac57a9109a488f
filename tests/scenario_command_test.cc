// `scenario run --trace FILE --timeline FILE.svg`: the trace of a failing
// 72-rank run validates against the trace-event format (every event has ph,
// ts, pid, tid; B/E balanced and in order per track; faults and errors as
// instants), and its SVG is well-formed XML with one lane per rank. Runner
// habits: -k picks, -x stops at the first failure, --junitxml parses. A
// file with `faults: drawn` runs as one swarm seed, and `--emit` writes its
// drawn case out as a scenario that reruns with the same trace hash.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engramlab_command.h"
#include "tests/file_text.h"
#include "tests/temp_dir.h"

namespace engram::testing {
namespace {

const std::string kScenarios = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";

std::string read_all(const std::string& path) { return file_text(path); }

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("/tmp/scenario_draw_test") {}
};

TEST(ScenarioTrace, FailingNvl72RunValidatesAsTraceEventsAndSvg) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string trace = dir.path + "/run.json", svg = dir.path + "/run.svg";
  const CommandOutput out = run_engramlab("scenario run " + kScenarios + "/nvl72_rack_import_fault.yaml --trace " +
                                          trace + " --timeline " + svg);
  ASSERT_EQ(out.exit_code, 0) << out.text;

  const nlohmann::json doc = nlohmann::json::parse(read_all(trace));
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, int> depth;          // tid -> open B
  std::map<int, double> last_ts;     // tid -> ts of its last event
  std::map<std::string, int> instants;
  int slices = 0;
  for (const auto& e : doc["traceEvents"]) {
    for (const char* key : {"ph", "ts", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << key << " missing: " << e.dump();
    const std::string ph = e["ph"];
    const int tid = e["tid"];
    const double ts = e["ts"];
    EXPECT_GE(ts, last_ts[tid]) << e.dump();
    last_ts[tid] = ts;
    if (ph == "B") {
      ++depth[tid];
      ++slices;
    } else if (ph == "E") {
      EXPECT_GT(depth[tid], 0) << "E without B on tid " << tid;
      --depth[tid];
    } else if (ph == "i") {
      ++instants[e["cat"].get<std::string>()];
    }
  }
  for (const auto& [tid, open] : depth) EXPECT_EQ(open, 0) << "unbalanced B/E on tid " << tid;
  EXPECT_EQ(depth.size(), 72u);
  EXPECT_GT(slices, 72 * 3);
  EXPECT_GE(instants["fault"], 1);
  EXPECT_GE(instants["error"], 72);  // every rank failed
  EXPECT_NE(read_all(trace).find("\"group_members\":\"0-71\""), std::string::npos);

  // Well-formed XML with one lane per rank.
  const CommandOutput parsed = run_engramlab(
      "", "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
          "print('lanes', sum(1 for g in d.getElementsByTagName('g') if g.getAttribute('class') == 'lane'))\" " +
              svg + " #");
  EXPECT_EQ(parsed.exit_code, 0) << parsed.text;
  EXPECT_NE(parsed.text.find("lanes 72"), std::string::npos) << parsed.text;
}

// A temp dir holding dep4_shared.yaml as-is (passes) and two copies with a
// wrong expect.placement (fail).
struct RunnerDir : TempDir {
  RunnerDir() {
    const std::string good = read_all(kScenarios + "/dep4_shared.yaml");
    std::string bad = good;
    bad.replace(bad.find("placement: host_shared"), 22, "placement: host_private");
    std::ofstream(path + "/a_good.yaml") << good;
    std::ofstream(path + "/b_bad_one.yaml") << bad;
    std::ofstream(path + "/c_bad_two.yaml") << bad;
  }
};

// `scenario run DIR ARGS` exits `code` and prints `text`; returns its output.
CommandOutput expect_run(const RunnerDir& dir, const std::string& args, int code, const std::string& text) {
  CommandOutput out = run_engramlab("scenario run " + dir.path + " " + args);
  EXPECT_EQ(out.exit_code, code) << args << ":\n" << out.text;
  EXPECT_NE(out.text.find(text), std::string::npos) << args << ": no '" << text << "' in\n" << out.text;
  return out;
}

TEST(ScenarioRunner, KeywordPicksByNameOrPathAndNoneMatchedExitsTwo) {
  RunnerDir dir;
  ASSERT_FALSE(dir.path.empty());
  expect_run(dir, "-k a_good", 0, "1 of 1 scenarios passed");
  expect_run(dir, "-k bad_", 1, "0 of 2 scenarios passed");
  expect_run(dir, "-k no_such_scenario", 2, "no scenario's name or file path contains 'no_such_scenario'");
}

TEST(ScenarioRunner, ExitFirstStopsAfterTheFirstFailure) {
  RunnerDir dir;
  ASSERT_FALSE(dir.path.empty());
  const CommandOutput out = expect_run(dir, "-x", 1, "1 of 2 scenarios passed");
  EXPECT_NE(out.text.find("1 scenarios not run"), std::string::npos) << out.text;
  EXPECT_EQ(out.text.find("c_bad_two"), std::string::npos) << out.text;
  expect_run(dir, "--exitfirst", 1, "1 of 2 scenarios passed");
  expect_run(dir, "", 1, "1 of 3 scenarios passed");
}

TEST(ScenarioRunner, JunitXmlParsesWithOneTestcasePerScenario) {
  RunnerDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string xml = dir.path + "/report.xml";
  const CommandOutput out = run_engramlab("scenario run " + dir.path + " --junitxml " + xml);
  EXPECT_EQ(out.exit_code, 1) << out.text;
  const CommandOutput parsed = run_engramlab(
      "", "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
          "s = d.getElementsByTagName('testsuite'); c = d.getElementsByTagName('testcase'); "
          "f = d.getElementsByTagName('failure'); "
          "print('suites', len(s), 'cases', len(c), 'failures', len(f), 'attr', s[0].getAttribute('failures')); "
          "print('repro', all('reproduce: ' in x.firstChild.data for x in f)); "
          "print('named', all(x.getAttribute('name') and x.getAttribute('classname') for x in c)); "
          "print('msg', f[0].getAttribute('message'))\" " +
              xml + " #");
  EXPECT_EQ(parsed.exit_code, 0) << parsed.text;
  EXPECT_NE(parsed.text.find("suites 1 cases 3 failures 2 attr 2"), std::string::npos) << parsed.text;
  EXPECT_NE(parsed.text.find("repro True"), std::string::npos) << parsed.text;
  EXPECT_NE(parsed.text.find("named True"), std::string::npos) << parsed.text;
  EXPECT_NE(parsed.text.find("msg placement"), std::string::npos) << parsed.text;
}

// A failing 72-rank run: the per-rank table folds ranks alike into ranges,
// and the root-cause error is printed once, --details or not.
TEST(ScenarioRunner, FailingNvl72RunPrintsAFoldedRankTableAndTheErrorOnce) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::string text = read_all(kScenarios + "/nvl72_rack_import_fault.yaml");
  const size_t at = text.find("rank: 9, step: import");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 7, "rank: 8");
  std::ofstream(dir.path + "/nvl72_broken.yaml") << text;
  for (const std::string details : {"", " --details"}) {
    const CommandOutput out = run_engramlab("scenario run " + dir.path + "/nvl72_broken.yaml" + details);
    EXPECT_EQ(out.exit_code, 1) << out.text;
    EXPECT_NE(out.text.find("error rank: expected 8, got 9"), std::string::npos) << out.text;
    const std::string root = "cuMemImportFromShareableHandle: injected fault (site import)";
    // Once in the failure, once in rank 9's table line; nowhere else.
    size_t count = 0;
    for (size_t p = out.text.find(root); p != std::string::npos; p = out.text.find(root, p + 1)) ++count;
    EXPECT_EQ(count, 2u) << out.text;
    EXPECT_EQ(out.text.find("error seen"), std::string::npos) << out.text;
    EXPECT_NE(out.text.find("ranks 0-8, 10-71  tray-0..tray-17 (18 hosts)  import     unavailable: handle exchange "
                            "abandoned: rank 9 failed"),
              std::string::npos)
        << out.text;
    EXPECT_NE(out.text.find("rank 9            tray-2                      import     permission_denied"),
              std::string::npos)
        << out.text;
    size_t lines = 0;
    for (char c : out.text) lines += c == '\n' ? 1 : 0;
    EXPECT_LT(lines, 15u) << out.text;  // not a line per rank
  }
}

const std::string kDrawn = kScenarios + "/drawn_faults_tp8_h200_peer.yaml";

// The trace hash a one-scenario `scenario run --json` reports.
std::string trace_hash_of(const CommandOutput& out) {
  const nlohmann::json doc = nlohmann::json::parse(out.text.substr(out.text.find('{')));
  return doc["scenarios"][0]["trace_hash"];
}

// `--emit` at three seeds: the scenario it prints is the one `fuzz --file
// --emit-scenario` prints for the same file and seed, and run alone it passes
// with the drawn run's trace hash.
TEST(DrawnScenario, EmitWritesACaseThatRerunsWithTheSameTraceHash) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  for (const char* seed : {"5", "17", "99"}) {
    const CommandOutput drawn = run_engramlab("scenario run " + kDrawn + " --seed " + seed + " --json");
    ASSERT_EQ(drawn.exit_code, 0) << drawn.text;
    const std::string file = dir.path + "/seed" + seed + ".yaml";
    const CommandOutput emitted =
        run_engramlab("scenario run --emit " + kDrawn + " --seed " + seed, "", "> " + file);
    ASSERT_EQ(emitted.exit_code, 0) << emitted.text << read_all(file);
    EXPECT_NE(emitted.text.find("run alone it passes with trace hash"), std::string::npos) << emitted.text;
    const CommandOutput fuzzed = run_engramlab("fuzz --file " + kDrawn + " --emit-scenario " + seed, "",
                                               "2>/dev/null | diff - " + file);
    EXPECT_EQ(fuzzed.exit_code, 0) << "scenario run --emit and fuzz --emit-scenario differ:\n" << fuzzed.text;
    const CommandOutput rerun = run_engramlab("scenario run " + file + " --json");
    ASSERT_EQ(rerun.exit_code, 0) << rerun.text;
    EXPECT_EQ(trace_hash_of(rerun), trace_hash_of(drawn)) << "seed " << seed;
    EXPECT_NE(read_all(file).find("expect:"), std::string::npos) << read_all(file);
  }
}

// Fault rates are drawn parts too: `--emit` writes the file at the seed with
// the outcome seen as its expectation, and it reruns with the same trace hash.
TEST(DrawnScenario, EmitOfAFileWithFaultRatesRerunsWithTheSameTraceHash) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::string rated = read_all(kDrawn);
  rated.replace(rated.find("faults: drawn"), 13,
                "faults: {rates: {import: 0.3, send: 0.2}}\nexpect: {faults_fired: [import]}");
  const std::string source = dir.path + "/rated.yaml";
  std::ofstream(source) << rated;
  int with_faults = 0;
  for (const char* seed : {"1", "2", "3", "4", "5", "6"}) {
    const CommandOutput original = run_engramlab("scenario run " + source + " --seed " + seed + " --json");
    ASSERT_NE(original.text.find('{'), std::string::npos) << original.text;
    const std::string file = dir.path + "/rated_seed" + seed + ".yaml";
    const CommandOutput emitted = run_engramlab("scenario run --emit " + source + " --seed " + seed, "", "> " + file);
    ASSERT_EQ(emitted.exit_code, 0) << emitted.text << read_all(file);
    const CommandOutput rerun = run_engramlab("scenario run " + file + " --json");
    ASSERT_EQ(rerun.exit_code, 0) << rerun.text << read_all(file);
    EXPECT_EQ(trace_hash_of(rerun), trace_hash_of(original)) << "seed " << seed;
    EXPECT_NE(read_all(file).find("rates: {import: 0.3, send: 0.2}"), std::string::npos) << read_all(file);
    with_faults += read_all(file).find("faults_fired:") != std::string::npos ? 1 : 0;
  }
  EXPECT_GT(with_faults, 0) << "no seed fired a fault: the test shows nothing";
}

// A model file named relative to the source file is written as the path it
// resolved to, so the emitted scenario runs wherever it is put.
TEST(DrawnScenario, AnEmittedScenarioFindsARelativeModelFile) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  ASSERT_EQ(std::system(("mkdir -p '" + dir.path + "/src' '" + dir.path + "/models' '" + dir.path + "/out' && cp '" +
                         std::string(ENGRAM_SOURCE_DIR) + "/models/example-3x16-bf16.yaml' '" + dir.path +
                         "/models/'")
                            .c_str()),
            0);
  for (const char* faults : {"faults: drawn", "faults: {rates: {import: 0.3}}\nexpect: {no_leaks: true}"}) {
    std::string text = read_all(kDrawn);
    text.replace(text.find("faults: drawn"), 13, faults);
    text.replace(text.find("model: deepseek-v4.1-flash"), 26, "model: ../models/example-3x16-bf16.yaml");
    std::ofstream(dir.path + "/src/case.yaml") << text;
    const std::string file = dir.path + "/out/case.yaml";
    const CommandOutput emitted =
        run_engramlab("scenario run --emit " + dir.path + "/src/case.yaml --seed 3", "", "> " + file);
    ASSERT_EQ(emitted.exit_code, 0) << faults << ":\n" << emitted.text << read_all(file);
    EXPECT_NE(read_all(file).find("model: " + dir.path + "/models/example-3x16-bf16.yaml"), std::string::npos)
        << read_all(file);
    const CommandOutput rerun = run_engramlab("scenario run " + file);
    EXPECT_EQ(rerun.exit_code, 0) << rerun.text;
  }
}

// What `faults: drawn` refuses, each naming the field and the way out.
TEST(DrawnScenario, RefusalsNameTheFieldAndTheFix) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string drawn = read_all(kDrawn);
  std::ofstream(dir.path + "/with_expect.yaml") << drawn << "expect: {placement: device_peer}\n";
  std::string word = drawn;
  word.replace(word.find("faults: drawn"), 13, "faults: random");
  std::ofstream(dir.path + "/bad_word.yaml") << word;
  CommandOutput out = run_engramlab("scenario run " + dir.path + "/with_expect.yaml");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("expect: a scenario whose faults are drawn cannot know its outcome"), std::string::npos)
      << out.text;
  out = run_engramlab("scenario run " + dir.path + "/bad_word.yaml");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("faults: 'random' is neither `drawn` nor a section"), std::string::npos) << out.text;
  out = run_engramlab("scenario run --emit " + kScenarios + "/fault_import.yaml");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("fault_import.yaml plans all its faults itself"), std::string::npos) << out.text;
  out = run_engramlab("scenario run --emit " + kDrawn + " --json");
  EXPECT_EQ(out.exit_code, 2) << out.text;
  out = run_engramlab("scenario run --real " + kDrawn);
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("only the emulator draws"), std::string::npos) << out.text;
}

}  // namespace
}  // namespace engram::testing
