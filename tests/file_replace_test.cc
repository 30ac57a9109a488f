// Files written into directories other users may write: a symlink planted
// at the name a writer would use (by this user or, where the test runs as
// root, by another uid) is never written through, and the file still lands.
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

TEST(FileReplace, APlantedTemporaryOrDestinationSymlinkIsNeverWrittenThrough) {
  for (uid_t uid : planters()) {
    SCOPED_TRACE("planted by uid " + std::to_string(uid));
    SharedDir d;
    const std::string path = d.shared + "/rank-0.json";
    ASSERT_TRUE(plant_symlink_as(uid, d.victim, path + ".tmp"));
    ASSERT_TRUE(plant_symlink_as(uid, d.victim, path));
    const Status wrote = replace_file_contents(path, "record\n", "the record");
    ASSERT_TRUE(wrote.is_ok()) << wrote.to_string();
    EXPECT_EQ(read_all(d.victim), kVictimText);
    struct stat st{};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << "the symlink at the destination is replaced by the file";
    EXPECT_EQ(read_all(path), "record\n");
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(d.shared)) {
      (void)e;
      ++entries;
    }
    EXPECT_EQ(entries, 2u) << "the file and the planted .tmp link; no temporary left";
  }
}

TEST(FileReplace, AnUnwritableDirectoryIsAnErrorNamingThePath) {
  const Status wrote = replace_file_contents("/nonexistent/engramlab-dir/out.csv", "x", "the CSV");
  EXPECT_EQ(wrote.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(wrote.message().find("the CSV"), std::string::npos) << wrote.message();
  EXPECT_NE(wrote.message().find("/nonexistent/engramlab-dir/out.csv"), std::string::npos) << wrote.message();
}

TEST(FileReplace, AnOutputPathThatIsAStreamIsWrittenThrough) {
  SharedDir d;
  const std::string fifo = d.base + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const pid_t reader = ::fork();
  if (reader == 0) {
    std::ifstream in(fifo);
    std::string line;
    std::getline(in, line);
    ::_exit(line == "streamed" ? 0 : 1);
  }
  ASSERT_TRUE(write_output_file(fifo, "streamed\n", "the CSV").is_ok());
  int status = 0;
  ::waitpid(reader, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  struct stat st{};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "a stream is not replaced";

  const std::string link = d.shared + "/bench.csv";
  ASSERT_TRUE(plant_symlink_as(::geteuid(), d.victim, link));
  ASSERT_TRUE(write_output_file(link, "a,b\n", "the CSV").is_ok());
  EXPECT_EQ(read_all(d.victim), kVictimText);
  EXPECT_EQ(read_all(link), "a,b\n");
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

}  // namespace
}  // namespace engram
