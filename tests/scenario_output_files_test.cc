// What `scenario run` writes, through its own command line (issue 50, items
// 9, 17 and 21; fuzz and the writer have their own tests): a JUnit report
// that replaces a private file keeps its mode, a 240-character report name
// is written, a scenario file named with control and Latin-1 bytes leaves
// the report well-formed XML, and `--emit` writes a relative `lookup.model`
// as the path it resolved to, so the emitted file runs from anywhere.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engramlab_command.h"
#include "tests/file_text.h"
#include "tests/temp_dir.h"

namespace engram::testing {
namespace {

const std::string kScenarios = std::string(ENGRAM_SOURCE_DIR) + "/scenarios";

std::string read_all(const std::string& path) { return file_text(path); }

// python3's XML parser over `xml`: "cases N" and the first case's
// classname, or the parser's error.
CommandOutput parse_junit(const std::string& xml) {
  return run_engramlab("", "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
                           "c = d.getElementsByTagName('testcase'); print('cases', len(c)); "
                           "print('classname', c[0].getAttribute('classname'))\" '" +
                               xml + "' #");
}

TEST(ScenarioJunit, AReplacedReportKeepsItsModeAndA240CharacterNameIsWritten) {
  TempDir dir("/tmp/engramlab-scenario-junit");
  ASSERT_FALSE(dir.path.empty());
  const std::string scenario = kScenarios + "/dp1_resolves_disabled.yaml";
  const std::string xml = dir.path + "/report.xml";
  std::ofstream(xml) << "old report\n";
  ASSERT_EQ(::chmod(xml.c_str(), 0600), 0);
  const CommandOutput out = run_engramlab("scenario run " + scenario + " --junitxml " + xml);
  ASSERT_EQ(out.exit_code, 0) << out.text;
  struct stat st{};
  ASSERT_EQ(::stat(xml.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "the private report became readable by others";
  EXPECT_NE(read_all(xml).find("<testsuite"), std::string::npos) << read_all(xml);
  EXPECT_EQ(read_all(xml).find("old report"), std::string::npos);

  // 240 characters, the most most file systems take (255) less room for a
  // temporary suffix the writer must not need.
  const std::string long_xml = dir.path + "/" + std::string(236, 'r') + ".xml";
  const CommandOutput long_out = run_engramlab("scenario run " + scenario + " --junitxml " + long_xml);
  ASSERT_EQ(long_out.exit_code, 0) << long_out.text;
  const CommandOutput parsed = parse_junit(long_xml);
  EXPECT_EQ(parsed.exit_code, 0) << parsed.text;
  EXPECT_NE(parsed.text.find("cases 1"), std::string::npos) << parsed.text;
  // Nothing beside the reports: no temporary file left.
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path)) ++entries;
  EXPECT_EQ(entries, 2u);
}

TEST(ScenarioJunit, ControlAndLatin1BytesInAScenarioFileNameLeaveTheXmlWellFormed) {
  TempDir dir("/tmp/engramlab-scenario-junit-bytes");
  ASSERT_FALSE(dir.path.empty());
  // Named by the directory on the command line: the bytes reach the report
  // from the file's own name.
  std::filesystem::create_directory(dir.path + "/in");
  std::filesystem::copy_file(kScenarios + "/dp1_resolves_disabled.yaml", dir.path + "/in/caf\xe9\x01\x1b[31m.yaml");
  const std::string xml = dir.path + "/report.xml";
  const CommandOutput out = run_engramlab("scenario run " + dir.path + "/in --junitxml " + xml);
  ASSERT_EQ(out.exit_code, 0) << out.text;
  const CommandOutput parsed = parse_junit(xml);
  ASSERT_EQ(parsed.exit_code, 0) << "not well-formed:\n" << parsed.text << read_all(xml);
  EXPECT_NE(parsed.text.find("cases 1"), std::string::npos) << parsed.text;
  // Each byte shown, none raw: \xe9, \x01 and ESC written out.
  EXPECT_NE(read_all(xml).find("caf\\xe9\\x01\\x1b[31m.yaml"), std::string::npos) << read_all(xml);
}

TEST(ScenarioEmit, ARelativeLookupModelIsWrittenAsThePathItResolvedTo) {
  TempDir dir("/tmp/engramlab-scenario-emit-lookup");
  ASSERT_FALSE(dir.path.empty());
  std::filesystem::create_directories(dir.path + "/src/models");
  std::filesystem::create_directory(dir.path + "/out");
  std::filesystem::copy_file(std::string(ENGRAM_SOURCE_DIR) + "/models/tiny.yaml", dir.path + "/src/models/m.yaml");
  std::string text = read_all(kScenarios + "/drawn_faults_tp8_h200_peer.yaml");
  const std::string lookup = "lookup: {model: tiny,";
  ASSERT_NE(text.find(lookup), std::string::npos) << text;
  text.replace(text.find(lookup), lookup.size(), "lookup: {model: models/m.yaml,");
  std::ofstream(dir.path + "/src/case.yaml") << text;
  const std::string emitted = dir.path + "/out/case.yaml";
  const CommandOutput out = run_engramlab("scenario run --emit " + dir.path + "/src/case.yaml --seed 3", "",
                                          "> " + emitted);
  ASSERT_EQ(out.exit_code, 0) << out.text << read_all(emitted);
  EXPECT_NE(read_all(emitted).find(dir.path + "/src/models/m.yaml"), std::string::npos) << read_all(emitted);
  EXPECT_EQ(read_all(emitted).find("model: models/m.yaml"), std::string::npos) << read_all(emitted);
  // From another folder, where models/m.yaml names nothing.
  const CommandOutput rerun = run_engramlab("scenario run " + emitted, "cd / &&");
  EXPECT_EQ(rerun.exit_code, 0) << rerun.text;
}

}  // namespace
}  // namespace engram::testing
