// The job's socket directory on a host other users share: every component
// of its path is checked, a squatted one (a file, a symlink, a directory of
// another uid, a parent others may write) is refused naming it, and what a
// killed job left is swept only when nobody listens there any more.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/ipc/signal_teardown.h"
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

// What SocketDir leaves in a directory it made.
void mark_as_made(const std::string& dir) {
  std::FILE* f = std::fopen((dir + "/" + kSocketDirMarker).c_str(), "w");
  ASSERT_NE(f, nullptr) << dir;
  std::fclose(f);
}

void make_old(const std::string& path) {
  const timespec old_times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 60, 0}};
  ::utimensat(AT_FDCWD, path.c_str(), old_times, 0);
}

std::string report_of(const std::vector<SweptSocketDir>& swept) {
  std::string report;
  for (const auto& d : swept) report += d.path + ": " + d.outcome + "\n";
  return report;
}

TEST(HostSocketDir, SweepRemovesOnlyDirectoriesOfEndedJobs) {
  SharedTmp tmp;
  const std::string root = tmp.path + "/engramlab-" + kUid;
  ASSERT_EQ(::mkdir(root.c_str(), 0700), 0);
  mark_as_made(root);
  for (const char* job : {"dead", "live", "foreign", "fresh", "users"}) {
    ASSERT_EQ(::mkdir((root + "/" + job).c_str(), 0700), 0);
  }
  leave_dead_socket(root + "/dead/rank-0.sock");
  leave_dead_socket(root + "/dead/rank-1.sock");
  const int listener = live_socket(root + "/live/rank-0.sock");
  leave_dead_socket(root + "/live/rank-1.sock");
  mark_as_made(root + "/foreign");
  { std::FILE* f = std::fopen((root + "/foreign/notes.txt").c_str(), "w"); std::fclose(f); }
  mark_as_made(root + "/fresh");
  make_old(root + "/users");  // empty, old, but nobody marked it: not engramlab's

  auto swept = sweep_stale_socket_dirs(root);
  ASSERT_TRUE(swept.is_ok()) << swept.status().to_string();
  std::string report = report_of(*swept);
  EXPECT_FALSE(fs::exists(root + "/dead")) << report;
  EXPECT_TRUE(fs::exists(root + "/live/rank-0.sock")) << report;
  EXPECT_TRUE(fs::exists(root + "/foreign/notes.txt")) << report;
  EXPECT_TRUE(fs::exists(root + "/fresh")) << "a marked, empty, new directory may be a job starting\n" << report;
  EXPECT_TRUE(fs::exists(root + "/users")) << report;
  EXPECT_NE(report.find("in use (rank-0.sock has a listener)"), std::string::npos) << report;
  EXPECT_NE(report.find("notes.txt (a regular file), which engramlab does not make"), std::string::npos) << report;
  EXPECT_NE(report.find("users: kept: no rank sockets and no .engramlab-socket-dir marker"), std::string::npos)
      << report;
  ::close(listener);

  // Once the live job ends (its socket has no listener) and the others are
  // cleared, a sweep takes every job directory engramlab made; the user's
  // empty directory stays, and with it the root.
  fs::remove(root + "/foreign/notes.txt");
  for (const char* job : {"foreign", "fresh"}) make_old(root + "/" + job);
  swept = sweep_stale_socket_dirs(root);
  ASSERT_TRUE(swept.is_ok()) << swept.status().to_string();
  report = report_of(*swept);
  for (const char* job : {"live", "foreign", "fresh"}) EXPECT_FALSE(fs::exists(root + "/" + job)) << job << "\n" << report;
  EXPECT_TRUE(fs::exists(root + "/users")) << report;
  // Without it, the root (marked: engramlab made it) goes too.
  fs::remove(root + "/users");
  swept = sweep_stale_socket_dirs(root);
  ASSERT_TRUE(swept.is_ok()) << swept.status().to_string();
  EXPECT_FALSE(fs::exists(root)) << report_of(*swept);
  // Nothing there is nothing to do.
  EXPECT_TRUE(sweep_stale_socket_dirs(root).is_ok());
}

// Pointed at a directory engramlab did not make (a home directory), a sweep
// removes none of its empty folders and never the directory itself; only a
// job directory holding rank sockets goes.
TEST(HostSocketDir, SweepOfADirectoryEngramlabDidNotMakeRemovesOnlyJobDirectories) {
  SharedTmp tmp;
  const std::string home = tmp.path + "/home";
  ASSERT_EQ(::mkdir(home.c_str(), 0700), 0);
  for (const char* folder : {"Documents", "Music", "job-left"}) {
    ASSERT_EQ(::mkdir((home + "/" + folder).c_str(), 0700), 0);
    make_old(home + "/" + folder);
  }
  leave_dead_socket(home + "/job-left/rank-0.sock");
  auto swept = sweep_stale_socket_dirs(home);
  ASSERT_TRUE(swept.is_ok()) << swept.status().to_string();
  const std::string report = report_of(*swept);
  EXPECT_TRUE(fs::exists(home + "/Documents")) << report;
  EXPECT_TRUE(fs::exists(home + "/Music")) << report;
  EXPECT_FALSE(fs::exists(home + "/job-left")) << report;
  fs::remove(home + "/Documents");
  fs::remove(home + "/Music");
  swept = sweep_stale_socket_dirs(home);
  ASSERT_TRUE(swept.is_ok());
  EXPECT_TRUE(fs::exists(home)) << "an empty directory engramlab did not make stays\n" << report_of(*swept);
}

// ENGRAMLAB_SOCKET_DIR names a directory the user made: the last rank out
// leaves it, while one SocketDir created is removed.
// A rank ended by SIGTERM while another job's directory shares the per-user
// root: its own job directory goes, the root stays with its marker, and the
// other job, leaving last, removes the root. (The root without its marker
// outlived every job: the suite's leftover check caught an empty
// /run/engramlab after a signal test ran beside another.)
TEST(HostSocketDir, ARankEndedBySignalLeavesTheSharedRootMarkedForTheLastJob) {
  SharedTmp tmp;
  const std::string root = tmp.path + "/engramlab-" + kUid;
  // The other job's directories as its own process made them (made here by
  // hand: a SocketDir of this process would be in the forked child's
  // teardown table too).
  for (const std::string& made : {root, root + "/other-job"}) {
    ASSERT_EQ(::mkdir(made.c_str(), 0700), 0) << made;
    const int marker = ::open((made + "/" + kSocketDirMarker).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(marker, 0);
    ::close(marker);
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child makes its own job directory, then a termination signal ends it.
    auto mine = SocketDir::open(root + "/signalled-job", 2);
    if (!mine.is_ok()) ::_exit(3);
    tear_down_on_termination_signals();
    ::raise(SIGTERM);
    ::_exit(4);  // not reached: the handler re-raises the signal
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "child status " << status;
  EXPECT_FALSE(fs::exists(root + "/signalled-job")) << "the signalled rank's own directory goes";
  EXPECT_TRUE(fs::exists(root + "/other-job"));
  EXPECT_TRUE(fs::exists(root + "/" + kSocketDirMarker)) << "the shared root keeps its marker";
  {
    // The other job's last rank leaves.
    auto other = SocketDir::open(root + "/other-job", 2);
    ASSERT_TRUE(other.is_ok()) << other.status().to_string();
  }
  EXPECT_FALSE(fs::exists(root)) << "the last job out removes the root";
}

TEST(HostSocketDir, ADirectoryTheUserMadeIsKeptWhenTheLastRankLeaves) {
  SharedTmp tmp;
  const std::string theirs = tmp.path + "/my-sockets";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  { auto dir = SocketDir::open(theirs, 1); ASSERT_TRUE(dir.is_ok()) << dir.status().to_string(); }
  EXPECT_TRUE(fs::exists(theirs));
  const std::string made = tmp.path + "/made-by-us";
  {
    auto dir = SocketDir::open(made, 1);
    ASSERT_TRUE(dir.is_ok()) << dir.status().to_string();
    EXPECT_TRUE(fs::exists(made + "/" + kSocketDirMarker));
  }
  EXPECT_FALSE(fs::exists(made));
  remove_ended_job_dir(theirs);
  EXPECT_TRUE(fs::exists(theirs)) << "the launcher's clean-up leaves it too";
}

}  // namespace
}  // namespace engram::ipc
