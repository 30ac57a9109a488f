// Output files (core/base/file_replace.h), written into directories other
// users may write: a symlink planted at the name a writer would use (by this
// user or, where the test runs as root, by another uid) is never written
// through; and every output flag refuses a link, a FIFO, a /proc path and
// another user's file (issue 50, items 1 and 17).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/base/file_replace.h"
#include "engramlab_command.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;
const std::string kVictimText = "the victim's own bytes\n";

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// base/ (0755, ours) holds victim (0644) and shared/ (0777, not sticky, so
// the kernel's protected_symlinks does not step in: the code must).
struct SharedDir {
  SharedDir() {
    char templ[] = "/tmp/engramlab-shared-XXXXXX";
    base = ::mkdtemp(templ);
    ::chmod(base.c_str(), 0755);
    shared = base + "/shared";
    ::mkdir(shared.c_str(), 0777);
    ::chmod(shared.c_str(), 0777);
    victim = base + "/victim";
    std::ofstream(victim) << kVictimText;
    ::chmod(victim.c_str(), 0644);
  }
  ~SharedDir() { fs::remove_all(base); }
  std::string base, shared, victim;
};

// Plants `link` -> `target` as `uid` (in a forked child that drops to it);
// false where that cannot be done here (not root).
bool plant_symlink_as(uid_t uid, const std::string& target, const std::string& link) {
  if (uid == ::geteuid()) return ::symlink(target.c_str(), link.c_str()) == 0;
  if (::geteuid() != 0) return false;
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(3);
    ::_exit(::symlink(target.c_str(), link.c_str()) == 0 ? 0 : 4);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::vector<uid_t> planters() {
  std::vector<uid_t> uids{::geteuid()};
  if (::geteuid() == 0) uids.push_back(kNobody);
  return uids;
}

TEST(FileReplace, APlantedTemporaryNameIsNeverWrittenThroughAndADestinationLinkIsRefused) {
  for (uid_t uid : planters()) {
    SCOPED_TRACE("planted by uid " + std::to_string(uid));
    SharedDir d;
    const std::string path = d.shared + "/rank-0.json";
    ASSERT_TRUE(plant_symlink_as(uid, d.victim, path + ".tmp"));
    const Status wrote = write_output_file(path, "record\n", "the record");
    ASSERT_TRUE(wrote.is_ok()) << wrote.to_string();
    EXPECT_EQ(read_all(d.victim), kVictimText);
    EXPECT_EQ(read_all(path), "record\n");
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(d.shared)) {
      (void)e;
      ++entries;
    }
    EXPECT_EQ(entries, 2u) << "the file and the planted .tmp link; no temporary left";

    const std::string linked = d.shared + "/trace.json";
    ASSERT_TRUE(plant_symlink_as(uid, d.victim, linked));
    const Status refused = write_output_file(linked, "trace\n", "the --trace file");
    EXPECT_EQ(refused.code(), ErrorCode::kFailedPrecondition);
    EXPECT_THAT(refused.message(), ::testing::HasSubstr("'" + linked + "': it is a symbolic link"));
    EXPECT_EQ(read_all(d.victim), kVictimText);
    struct stat st{};
    ASSERT_EQ(::lstat(linked.c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link is left as it is";
  }
}

TEST(FileReplace, AnUnwritableDirectoryIsAnErrorNamingThePath) {
  const Status wrote = write_output_file("/nonexistent/engramlab-dir/out.csv", "x", "the CSV");
  EXPECT_EQ(wrote.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(wrote.message().find("the CSV"), std::string::npos) << wrote.message();
  EXPECT_NE(wrote.message().find("/nonexistent/engramlab-dir/out.csv"), std::string::npos) << wrote.message();
}

// Item 17 of issue 50: a replaced private file stays private; a 240-byte
// name works (the temporary's name must fit NAME_MAX too); the null device
// discards (bench --svg /dev/null).
TEST(FileReplace, AReplacedFileKeepsItsModeALongNameWorksAndTheNullDeviceDiscards) {
  SharedDir d;
  const std::string secret = d.base + "/report.xml";
  std::ofstream(secret) << "old";
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  ASSERT_TRUE(write_output_file(secret, "new\n", "the JUnit XML report").is_ok());
  struct stat st{};
  ASSERT_EQ(::stat(secret.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(read_all(secret), "new\n");

  const std::string long_name = d.base + "/" + std::string(236, 'n') + ".xml";
  const Status wrote = write_output_file(long_name, "long\n", "the JUnit XML report");
  ASSERT_TRUE(wrote.is_ok()) << wrote.to_string();
  EXPECT_EQ(read_all(long_name), "long\n");
  EXPECT_TRUE(write_output_file("/dev/null", "gone\n", "the SVG plot").is_ok());
}

// `scenario rank --result-dir DIR` (here a rank that fails at once: its
// record is still written) with rank-0.json.tmp planted in DIR.
TEST(FileReplace, ARankRecordLandsBesideAPlantedSymlinkAndTheVictimIsUntouched) {
  for (uid_t uid : planters()) {
    SCOPED_TRACE("planted by uid " + std::to_string(uid));
    SharedDir d;
    ASSERT_TRUE(plant_symlink_as(uid, d.victim, d.shared + "/rank-0.json.tmp"));
    const auto out = testing::run_engramlab(
        testing::launch_one_rank("scenario rank " + d.base + "/missing.yaml --result-dir " + d.shared));
    EXPECT_EQ(out.exit_code, 1) << out.text;
    EXPECT_EQ(read_all(d.victim), kVictimText) << out.text;
    const std::string record = read_all(d.shared + "/rank-0.json");
    EXPECT_NE(record.find("missing.yaml"), std::string::npos) << record << out.text;
  }
}


// Every output flag x every attack on its path (issue 50, items 1 and 17):
// refused with the reason, nothing written through, and no hang (a FIFO
// would block open() for ever: `timeout` turns that into exit 124).
struct OutputFlag {
  const char* flag;
  const char* file_name;  // the name the flag writes (a result directory's record: rank-0.json)
  std::string (*command)(const std::string& path);
};

std::string dir_of(const std::string& path) { return path.substr(0, path.rfind('/')); }

const OutputFlag kOutputFlags[] = {
    {"scenario run --trace", "trace.json",
     [](const std::string& p) { return "scenario run " + std::string(ENGRAM_SOURCE_DIR) + "/scenarios/dp1_resolves_disabled.yaml --trace " + p; }},
    {"scenario run --timeline", "run.svg",
     [](const std::string& p) { return "scenario run " + std::string(ENGRAM_SOURCE_DIR) + "/scenarios/dp1_resolves_disabled.yaml --timeline " + p; }},
    {"scenario run --junitxml", "report.xml",
     [](const std::string& p) { return "scenario run " + std::string(ENGRAM_SOURCE_DIR) + "/scenarios/dp1_resolves_disabled.yaml --junitxml " + p; }},
    {"fuzz --trace", "trace.json", [](const std::string& p) { return "fuzz --seeds 1 --trace " + p; }},
    {"fuzz --timeline", "run.svg", [](const std::string& p) { return "fuzz --seeds 1 --timeline " + p; }},
    {"fuzz --junitxml", "report.xml", [](const std::string& p) { return "fuzz --seeds 1 --junitxml " + p; }},
    {"bench --csv", "bench.csv",
     [](const std::string& p) { return testing::launch_one_rank("bench --table-model tiny --svg /dev/null --csv " + p); }},
    {"bench --svg", "bench.svg",
     [](const std::string& p) { return testing::launch_one_rank("bench --table-model tiny --svg " + p); }},
    {"plan --sweep-svg", "sweep.svg",
     [](const std::string& p) { return "plan --hosts 1 --gpus-per-host 8 --sweep tp=1,2 --sweep-svg " + p; }},
    {"scenario rank --result-dir", "rank-0.json",
     [](const std::string& p) { return testing::launch_one_rank("scenario rank /nonexistent/engramlab.yaml --result-dir " + dir_of(p)); }},
};

struct Attack {
  const char* name;
  const char* reason;  // what the refusal must say
  // Plants the attack at `path` (in `d`); false: it cannot be done here.
  bool (*plant)(const SharedDir& d, const std::string& path);
  bool in_proc = false;
};

bool plant_link_to_victim(const SharedDir& d, const std::string& path) {
  return ::symlink(d.victim.c_str(), path.c_str()) == 0;
}
bool plant_link_to_device(const SharedDir&, const std::string& path) {
  return ::symlink("/dev/null", path.c_str()) == 0;
}
bool plant_fifo(const SharedDir&, const std::string& path) { return ::mkfifo(path.c_str(), 0666) == 0; }
bool plant_nothing(const SharedDir&, const std::string&) { return true; }
// Another user's file in a sticky, world-writable directory (/tmp's mode).
bool plant_other_users_file(const SharedDir&, const std::string& path) {
  if (::geteuid() != 0) return false;
  std::ofstream(path) << kVictimText;
  return ::chown(path.c_str(), kNobody, kNobody) == 0;
}

const Attack kAttacks[] = {
    {"symlink to a file", "is a symbolic link", plant_link_to_victim},
    {"symlink to a device", "is a symbolic link", plant_link_to_device},
    {"FIFO", "it is a FIFO", plant_fifo},
    {"/proc path", "in /proc", plant_nothing, true},
    {"another user's file in a sticky directory", "owned by uid 65534", plant_other_users_file},
};

TEST(OutputPathAttacks, EveryOutputFlagRefusesEveryAttackAndWritesNothingThrough) {
  int refused = 0;
  for (const OutputFlag& flag : kOutputFlags) {
    for (const Attack& attack : kAttacks) {
      SCOPED_TRACE(std::string(flag.flag) + " x " + attack.name);
      SharedDir d;
      const std::string sticky = d.base + "/sticky";
      ASSERT_EQ(::mkdir(sticky.c_str(), 01777), 0);
      ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
      std::string path = sticky + "/" + flag.file_name;
      if (attack.in_proc) path = std::string(flag.file_name) == "rank-0.json" ? "/proc/self/rank-0.json" : "/proc/self/status";
      if (!attack.plant(d, path)) {
        std::printf("[  SKIPPED ] %s x %s: needs root (another uid)\n", flag.flag, attack.name);
        continue;
      }
      const auto out = testing::run_engramlab(flag.command(path), "timeout 60 env -u RANK -u WORLD_SIZE CUDA_VISIBLE_DEVICES=");
      EXPECT_NE(out.exit_code, 0) << out.text;
      EXPECT_NE(out.exit_code, 124) << "hung on the path: " << out.text;
      EXPECT_THAT(out.text, ::testing::HasSubstr(attack.reason)) << out.text;
      EXPECT_THAT(out.text, ::testing::HasSubstr(path)) << "the refusal names the path";
      EXPECT_EQ(read_all(d.victim), kVictimText);
      if (attack.plant == plant_other_users_file) EXPECT_EQ(read_all(path), kVictimText);
      struct stat st{};
      if (!attack.in_proc) {
        ASSERT_EQ(::lstat(path.c_str(), &st), 0);
        EXPECT_EQ(attack.plant == plant_fifo, S_ISFIFO(st.st_mode));
      }
      size_t entries = 0;
      for (const auto& e : fs::directory_iterator(sticky)) {
        (void)e;
        ++entries;
      }
      EXPECT_EQ(entries, attack.in_proc ? 0u : 1u) << "nothing beside what was planted";
      ++refused;
    }
  }
  EXPECT_GE(refused, 40) << "every flag x the attacks that need no second uid";
}

}  // namespace
}  // namespace engram
