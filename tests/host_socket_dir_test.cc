// The job's socket directory on a host other users share: every component
// of its path is checked, a squatted one (a file, a symlink, a directory of
// another uid, a parent others may write) is refused naming it, and what a
// killed job left is swept only when nobody listens there any more.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "backends/ipc/socket_dir.h"

namespace engram::ipc {
namespace {

namespace fs = std::filesystem;

// A stand-in for /tmp: a sticky directory everyone may write.
struct SharedTmp {
  SharedTmp() {
    char templ[] = "/tmp/engramlab-sockdirtest-XXXXXX";
    path = ::mkdtemp(templ);
    ::chmod(path.c_str(), 01777);
  }
  ~SharedTmp() { fs::remove_all(path); }
  std::string path;
};

const std::string kUid = std::to_string(::geteuid());

Status open_in(const SharedTmp& tmp) {
  auto dir = SocketDir::open(tmp.path + "/engramlab-" + kUid + "/job1", 2);
  return dir.is_ok() ? Status::ok() : dir.status();
}

void expect_refused(const Status& s, const std::string& words) {
  ASSERT_EQ(s.code(), ErrorCode::kPermissionDenied) << s.to_string();
  EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("XDG_RUNTIME_DIR or ENGRAMLAB_SOCKET_DIR"), std::string::npos) << s.message();
}

TEST(HostSocketDir, CreatesPrivateDirectoriesAndRemovesThemAtTheEnd) {
  SharedTmp tmp;
  const std::string root = tmp.path + "/engramlab-" + kUid;
  {
    auto dir = SocketDir::open(root + "/job1", 2);
    ASSERT_TRUE(dir.is_ok()) << dir.status().to_string();
    EXPECT_EQ((*dir)->path(), root + "/job1");
    for (const std::string& p : {root, root + "/job1"}) {
      struct stat st{};
      ASSERT_EQ(::lstat(p.c_str(), &st), 0);
      EXPECT_TRUE(S_ISDIR(st.st_mode));
      EXPECT_EQ(st.st_mode & 0777, 0700u) << p;
      EXPECT_EQ(st.st_uid, ::geteuid());
    }
    // A second rank of the job opens the same directory.
    auto again = SocketDir::open(root + "/job1", 2);
    ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  }
  EXPECT_FALSE(fs::exists(root)) << "the job's directory and the per-user root go when the last rank leaves";
}

TEST(HostSocketDir, AFileSquattingThePathIsRefusedNamingIt) {
  SharedTmp tmp;
  const std::string squat = tmp.path + "/engramlab-" + kUid;
  { std::FILE* f = std::fopen(squat.c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  ::chown(squat.c_str(), 65534, 65534);
  expect_refused(open_in(tmp), squat + " is a regular file");
}

TEST(HostSocketDir, AnotherUsersOpenDirectoryIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a directory owned by another uid";
  SharedTmp tmp;
  const std::string squat = tmp.path + "/engramlab-" + kUid;
  ASSERT_EQ(::mkdir(squat.c_str(), 0777), 0);
  ::chmod(squat.c_str(), 0777);
  ASSERT_EQ(::chown(squat.c_str(), 65534, 65534), 0);
  expect_refused(open_in(tmp), "belongs to uid 65534 with mode 777");
  EXPECT_FALSE(fs::exists(squat + "/job1")) << "nothing is put inside it";
}

TEST(HostSocketDir, ASymlinkInOurPartIsRefused) {
  SharedTmp tmp;
  const std::string target = tmp.path + "/elsewhere";
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  const std::string link = tmp.path + "/engramlab-" + kUid;
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ::lchown(link.c_str(), 65534, 65534);
  expect_refused(open_in(tmp), "is a symbolic link to " + target);
  EXPECT_FALSE(fs::exists(target + "/job1"));
}

TEST(HostSocketDir, AParentOthersMayWriteWithoutTheStickyBitIsRefused) {
  SharedTmp tmp;
  ::chmod(tmp.path.c_str(), 0777);
  expect_refused(open_in(tmp), "is not sticky");
}

TEST(HostSocketDir, OurDirectoryWithAWiderModeIsRefused) {
  SharedTmp tmp;
  const std::string root = tmp.path + "/engramlab-" + kUid;
  ASSERT_EQ(::mkdir(root.c_str(), 0700), 0);
  ::chmod(root.c_str(), 0755);
  expect_refused(open_in(tmp), "with mode 755");
}

TEST(HostSocketDir, TheDefaultIsTheUsersRuntimeDirectoryWhenSet) {
  const char* saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string saved_value = saved ? saved : "";
  ::setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
  EXPECT_EQ(default_socket_dir("j"), "/run/user/4242/engramlab/j");
  ::unsetenv("XDG_RUNTIME_DIR");
  const std::string fallback = default_socket_dir("j");
  if (::geteuid() == 0) {
    EXPECT_TRUE(fallback == "/run/engramlab/j" || fallback == "/tmp/engramlab-0/j") << fallback;
  } else {
    EXPECT_EQ(fallback, "/tmp/engramlab-" + kUid + "/j");
  }
  if (saved) ::setenv("XDG_RUNTIME_DIR", saved_value.c_str(), 1);
}

// A bound socket whose process is gone, as a SIGKILLed rank leaves it.
void leave_dead_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
  ::close(fd);  // bound, never listening, never unlinked
}

int live_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(fd, 4), 0);
  return fd;
}

TEST(HostSocketDir, SweepRemovesOnlyDirectoriesOfEndedJobs) {
  SharedTmp tmp;
  const std::string root = tmp.path + "/engramlab-" + kUid;
  for (const char* job : {"dead", "live", "foreign", "fresh"}) {
    ASSERT_EQ(::mkdir(root.c_str(), 0700) == 0 || errno == EEXIST, true);
    ASSERT_EQ(::mkdir((root + "/" + job).c_str(), 0700), 0);
  }
  leave_dead_socket(root + "/dead/rank-0.sock");
  leave_dead_socket(root + "/dead/rank-1.sock");
  const int listener = live_socket(root + "/live/rank-0.sock");
  leave_dead_socket(root + "/live/rank-1.sock");
  { std::FILE* f = std::fopen((root + "/foreign/notes.txt").c_str(), "w"); std::fclose(f); }

  auto swept = sweep_stale_socket_dirs(root);
  ASSERT_TRUE(swept.is_ok()) << swept.status().to_string();
  std::string report;
  for (const auto& d : *swept) report += d.path + ": " + d.outcome + "\n";
  EXPECT_FALSE(fs::exists(root + "/dead")) << report;
  EXPECT_TRUE(fs::exists(root + "/live/rank-0.sock")) << report;
  EXPECT_TRUE(fs::exists(root + "/foreign/notes.txt")) << report;
  EXPECT_TRUE(fs::exists(root + "/fresh")) << "an empty, new directory may be a job starting\n" << report;
  EXPECT_NE(report.find("in use (rank-0.sock has a listener)"), std::string::npos) << report;
  EXPECT_NE(report.find("notes.txt (a regular file), which engramlab does not make"), std::string::npos) << report;
  ::close(listener);

  // Once the live job ends (its socket has no listener) and the others are
  // cleared, a sweep takes everything, the root too.
  fs::remove(root + "/foreign/notes.txt");
  const timespec old_times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 60, 0}};
  for (const char* job : {"foreign", "fresh"}) ::utimensat(AT_FDCWD, (root + "/" + job).c_str(), old_times, 0);
  swept = sweep_stale_socket_dirs(root);
  ASSERT_TRUE(swept.is_ok()) << swept.status().to_string();
  EXPECT_FALSE(fs::exists(root));
  // Nothing there is nothing to do.
  EXPECT_TRUE(sweep_stale_socket_dirs(root).is_ok());
}

}  // namespace
}  // namespace engram::ipc
