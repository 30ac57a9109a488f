// Every --json document, read back with a strict parser (nlohmann::json::parse
// rejects malformed JSON and invalid UTF-8): every scenario, errors of every
// kind, and a file name that is not UTF-8. Each is one line on stdout with
// schema_version, command, warnings as {key, text} and error as null or
// {code, message, rank, peer, step}.
#include "core/base/json_output.h"
#include "sim/faults.h"
#include "tests/temp_dir.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace engram {
namespace {

namespace fs = std::filesystem;

const std::string kEngramlab = std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab";
const std::string kScenarios = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";

struct JsonRun {
  int exit_code = -1;
  std::string out;
};

JsonRun run_stdout(const std::string& args) {
  JsonRun r;
  FILE* pipe = ::popen((kEngramlab + " " + args + " 2>/dev/null").c_str(), "r");
  char buf[65536];
  size_t n;
  while (pipe != nullptr && (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  const int status = pipe != nullptr ? ::pclose(pipe) : -1;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The shape every document shares; returns the parsed document.
Json expect_document(const JsonRun& r, const std::string& command, bool error_expected) {
  SCOPED_TRACE(command + ": " + r.out.substr(0, 2000));
  EXPECT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one document, one line";
  Json j;
  try {
    j = Json::parse(r.out);  // strict: throws on bad JSON or bad UTF-8
  } catch (const Json::exception& e) {
    ADD_FAILURE() << "not strict JSON: " << e.what();
    return j;
  }
  EXPECT_TRUE(j.is_object());
  EXPECT_EQ(j.value("schema_version", -1), kJsonSchemaVersion);
  EXPECT_EQ(j.value("command", std::string()), command);
  EXPECT_TRUE(j.contains("warnings") && j["warnings"].is_array());
  for (const Json& w : j["warnings"]) {
    EXPECT_TRUE(w.is_object() && w.size() == 2 && w["key"].is_string() && w["text"].is_string()) << w.dump();
  }
  EXPECT_TRUE(j.contains("error"));
  if (error_expected) {
    const Json& e = j["error"];
    EXPECT_TRUE(e.is_object() && e.size() == 5) << e.dump();
    EXPECT_TRUE(e["code"].is_string() && e["message"].is_string()) << e.dump();
    for (const char* key : {"rank", "peer"}) EXPECT_TRUE(e[key].is_null() || e[key].is_number_integer()) << e.dump();
    EXPECT_TRUE(e["step"].is_null() || e["step"].is_string()) << e.dump();
    EXPECT_NE(r.exit_code, 0);
  } else {
    EXPECT_TRUE(j["error"].is_null()) << j["error"].dump();
  }
  return j;
}

TEST(JsonOutput, ErrorObjectUsesNullForWhatDoesNotApply) {
  const Json e = error_json(Status(ErrorCode::kUnavailable, "gone", {.rank = 2, .peer = -1, .step = ""}));
  EXPECT_EQ(dump_json(e), R"({"code":"unavailable","message":"gone","rank":2,"peer":null,"step":null})");
  const Json full = error_json(Status(ErrorCode::kInternal, "x", {.rank = 0, .peer = 5, .step = "map"}));
  EXPECT_EQ(full["peer"], 5);
  EXPECT_EQ(full["step"], "map");
  EXPECT_TRUE(error_json_or_null(Status::ok()).is_null());
}

TEST(JsonOutput, BytesThatAreNotUtf8NeverBreakTheDocument) {
  Json j = json_document("test");
  j["file"] = std::string("bad-\xff\xfe-name.yaml");
  j["warnings"] = warnings_json(std::vector<Warning>{{"k", "text \xc3"}});
  const std::string text = dump_json(j);
  const Json back = Json::parse(text);
  EXPECT_EQ(back["file"], "bad-\xef\xbf\xbd\xef\xbf\xbd-name.yaml");  // U+FFFD each
  EXPECT_EQ(back["schema_version"], kJsonSchemaVersion);
}

TEST(JsonOutput, EveryScenarioParses) {
  const JsonRun r = run_stdout("scenario run --json " + kScenarios);
  EXPECT_EQ(r.exit_code, 0);
  const Json j = expect_document(r, "scenario run", false);
  ASSERT_TRUE(j["scenarios"].is_array());
  EXPECT_GE(j["scenarios"].size(), 20u);
  EXPECT_EQ(j["failed"], 0);
  bool saw_mixed = false, saw_error = false, saw_warning = false;
  for (const Json& s : j["scenarios"]) {
    SCOPED_TRACE(s.dump());
    EXPECT_TRUE(s["placement"].is_null() || s["placement"].is_string());
    if (s["placements"].size() > 1) saw_mixed = s["placement"].is_null();
    EXPECT_EQ(s["placements"].size() == 1, s["placement"].is_string());
    for (const Json& p : s["placements"]) EXPECT_TRUE(p["placement"].is_string() && p["ranks"].is_number_integer());
    for (const Json& w : s["warnings"]) EXPECT_TRUE(w["key"].is_string() && w["text"].is_string());
    saw_warning |= !s["warnings"].empty();
    if (!s["error"].is_null()) {
      saw_error = true;
      EXPECT_EQ(s["error"].size(), 5u);
      EXPECT_TRUE(s["error"]["code"].is_string());
    }
  }
  EXPECT_TRUE(saw_error);
  EXPECT_TRUE(saw_warning);
  (void)saw_mixed;
}

TEST(JsonOutput, ErrorsOfEveryKindAreDocumentsToo) {
  const testing::TempDir made("/tmp/engramlab-jsontest");
  const std::string& dir = made.path;
  // A bad scenario file whose name is not UTF-8.
  const std::string bad_name = dir + "/bad-\xff\xfe.yaml";
  std::ofstream(bad_name) << "hosts: [{name: a, gpus: 1}]\nlayout: {tp: 1}\nwat: 3\n";
  const JsonRun bad_file = run_stdout("scenario run --json '" + bad_name + "'");
  EXPECT_EQ(bad_file.exit_code, 2);
  const Json bf = expect_document(bad_file, "scenario run", true);
  EXPECT_EQ(bf["error"]["code"], "invalid_argument");
  // A good scenario under a name that is not UTF-8.
  const std::string good_name = dir + "/good-\xff.yaml";
  fs::copy_file(kScenarios + "/dep4_shared.yaml", good_name);
  const Json good = expect_document(run_stdout("scenario run --json '" + good_name + "'"), "scenario run", false);
  EXPECT_EQ(good["scenarios"][0]["file"], dir + "/good-\xef\xbf\xbd.yaml");
  expect_document(run_stdout("scenario run --json " + dir + "/missing.yaml"), "scenario run", true);
  expect_document(run_stdout("scenario run --json --seed x " + kScenarios), "scenario run", true);

  // plan: a deployment that cannot run, bad input, a parse error, a file that is not there.
  const Json none = expect_document(run_stdout("plan --json"), "plan", true);
  EXPECT_EQ(none["error"]["code"], "resource_exhausted");
  EXPECT_TRUE(none["ranks"].is_array()) << "the plan is there beside the error";
  const Json unitless = expect_document(run_stdout("plan --json --gpu-memory 141"), "plan", true);
  EXPECT_NE(unitless["error"]["message"].get<std::string>().find("141GiB"), std::string::npos);
  expect_document(run_stdout("plan --json --no-such-flag"), "plan", true);
  expect_document(run_stdout("plan --json --file '" + bad_name + "'"), "plan", true);
  const Json ok = expect_document(
      run_stdout("plan --json --cpu-offload --tp 1 --dp 4 --gpu-model gb200 --gpus-per-host 4 --shm-size 190GiB"), "plan",
      false);
  EXPECT_TRUE(ok["config"]["dp_shared_memory"].is_null()) << "unset is null";
  EXPECT_FALSE(ok["defaults_used"].empty());

  // fuzz, shm, doctor, bench.
  const Json fuzz = expect_document(run_stdout("fuzz --json --seeds 3"), "fuzz", false);
  EXPECT_EQ(fuzz["fault_sites"].size(), static_cast<size_t>(sim::kFaultSiteCount)) << "one row per site of the table";
  ASSERT_TRUE(fuzz["probes_never_hit"].is_array());
  EXPECT_FALSE(fuzz["probes_never_hit"].empty()) << "three seeds leave some coverage probe unhit";
  for (const Json& probe : fuzz["probes_never_hit"]) EXPECT_TRUE(probe.is_string());
  expect_document(run_stdout("fuzz --json --seeds 0"), "fuzz", true);
  const Json list = expect_document(run_stdout("shm list --json --dir " + dir), "shm list", false);
  EXPECT_TRUE(list["segments"].is_array());
  // Its own socket root: the machine's would sweep the socket directories of
  // other tests' jobs.
  expect_document(run_stdout("shm clean --json --dir " + dir + " --socket-root " + dir + "/sockets"), "shm clean",
                  false);
  std::ofstream(dir + "/plain-file") << "not a directory";
  expect_document(run_stdout("shm list --json --dir " + dir + "/plain-file"), "shm list", true);
  const Json doctor = expect_document(run_stdout("doctor --json"), "doctor", false);
  EXPECT_TRUE(doctor["placements"].is_array());
  expect_document(run_stdout("doctor --json --model nope"), "doctor", true);
  // At --tp 4 the host placements quote a TP slice: 47.2 GiB of V4.1-Flash's 188.8 GiB.
  const Json tp4 = expect_document(run_stdout("doctor --json --tp 4"), "doctor", false);
  EXPECT_EQ(tp4["model"]["tp"], 4);
  EXPECT_EQ(tp4["model"]["tp_slice_bytes_max"], 50'690'014'848ull);
  // Where the memory fit lets it run here; on a host whose RAM cannot hold a
  // copy, the verdict is the fit's refusal instead.
  bool private_line = false;
  for (const Json& p : tp4["placements"])
    if (p["placement"] == "host_private")
      private_line = p["verdict"].get<std::string>().find(p["fits"] == true
                                                              ? "47.209 GiB of host memory per rank at tp 4"
                                                              : "does not fit here") != std::string::npos;
  EXPECT_TRUE(private_line) << tp4.dump();
  expect_document(run_stdout("doctor --json --tp 0"), "doctor", true);
  // Without a GPU (or without CUDA built in) bench fails, as a document.
  const JsonRun bench = run_stdout("bench --json --tokens 0");
  expect_document(bench, "bench", true);
}

}  // namespace
}  // namespace engram
